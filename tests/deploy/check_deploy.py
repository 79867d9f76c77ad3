"""Checks of deploy/ and the Dockerfile that need more than a schema (run by scripts/validate-deploy.sh).

Usage: check_deploy.py CHECK --tmp DIR [--bin TQSERVE] [RENDERED.yaml ...]
Each check prints what it looked at, exits 1 with the reasons on failure, and appends lines worth reading even on
success (pending options, skipped parts) to DIR/notes.
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
METRIC_RE = re.compile(r"\btqserve_[a-z0-9_]+")
HIST_SUFFIXES = ("_bucket", "_sum", "_count")


class Failed(Exception):
    pass


class Ctx:
    def __init__(self, args):
        self.tmp = Path(args.tmp)
        self.bin = Path(args.bin) if args.bin else None
        self.rendered = [Path(p) for p in args.rendered]
        self.errors = []

    def error(self, msg):
        self.errors.append(msg)

    def note(self, msg):
        with open(self.tmp / "notes", "a") as f:
            f.write(msg + "\n")

    def have_bin(self):
        return self.bin is not None and self.bin.is_file() and os.access(self.bin, os.X_OK)

    def docs(self):
        out = {}
        for path in self.rendered:
            out[path.stem] = [d for d in yaml.safe_load_all(path.read_text()) if d]
        return out


# ---------------------------------------------------------------------------------------------------------------
# metric names

def metric_list():
    """deploy/metrics.txt -> {name: (type, status)}"""
    out = {}
    for line in (DEPLOY / "metrics.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, kind, status = line.split()
        assert kind in ("counter", "gauge", "histogram"), line
        assert status in ("today", "kv-manager"), line
        out[name] = (kind, status)
    return out


def base_name(name, listed):
    if name in listed:
        return name
    for s in HIST_SUFFIXES:
        if name.endswith(s) and listed.get(name[: -len(s)], ("",))[0] == "histogram":
            return name[: -len(s)]
    return None


def dashboard_exprs():
    dash = json.loads((DEPLOY / "grafana" / "tqserve-dashboard.json").read_text())
    exprs = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                exprs.append((p.get("title", "?"), t["expr"]))
            walk(p.get("panels", []))

    walk(dash.get("panels", []))
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if v.get("type") == "query" and q:
            exprs.append(("variable " + v["name"], q))
    return dash, exprs


def metric_uses():
    """(where, metric name) for every tqserve_* name used in deploy/."""
    uses = []
    _, exprs = dashboard_exprs()
    for where, e in exprs:
        uses += [("dashboard: " + where, m) for m in METRIC_RE.findall(e)]
    for f in sorted((DEPLOY / "prometheus").glob("*.y*ml")):
        uses += [(str(f.relative_to(ROOT)), m) for m in METRIC_RE.findall(f.read_text())]
    for f in sorted((DEPLOY / "k8s").rglob("*.yaml")):
        uses += [(str(f.relative_to(ROOT)), m) for m in METRIC_RE.findall(f.read_text())]
    return uses


def check_metrics(ctx):
    listed = metric_list()
    uses = metric_uses()
    for where, m in uses:
        if base_name(m, listed) is None:
            ctx.error(f"{where}: {m} is not in deploy/metrics.txt")
    print(f"{len(uses)} uses of {len({m for _, m in uses})} metric names, all in deploy/metrics.txt")
    # 'today' names must be registered by the server; kv-manager names that appear there should be marked today.
    sources = "\n".join(p.read_text(errors="replace") for p in (ROOT / "server").rglob("*.cc"))
    sources += "\n".join(p.read_text(errors="replace") for p in (ROOT / "engine").rglob("*.cc"))
    for name, (_, status) in listed.items():
        present = f'"{name}"' in sources
        if status == "today" and not present:
            ctx.error(f'deploy/metrics.txt says {name} exists today, but no source under server/ or engine/ names "{name}"')
        if status == "kv-manager" and present:
            ctx.note(f"{name} now appears in the sources: mark it 'today' in deploy/metrics.txt")
    today = sum(1 for k, s in listed.values() if s == "today")
    print(f"{today} metrics exported today, {len(listed) - today} planned (kv-manager)")
    unused = [n for n in listed if not any(base_name(m, listed) == n for _, m in uses)]
    if unused:
        print("listed but unused: " + ", ".join(unused))


# ---------------------------------------------------------------------------------------------------------------
# PromQL syntax (dashboard queries, adapter rule) through promtool: each expression becomes a recording rule.

GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "$namespace": ".*", "$pod": ".*"}


def check_promql(ctx):
    _, exprs = dashboard_exprs()
    rules = []
    for where, e in exprs:
        if e.startswith("label_values("):  # Grafana's variable helper, not PromQL: check the selector inside
            inner = re.match(r"label_values\((.*),\s*[a-z_]+\)$", e)
            if not inner:
                ctx.error(f"dashboard {where}: cannot read {e}")
                continue
            e = inner.group(1)
        for k, v in GRAFANA_VARS.items():
            e = e.replace(k, v)
        if "$" in e:
            ctx.error(f"dashboard {where}: unknown variable in {e}")
        rules.append({"record": f"check:dashboard_{len(rules)}", "expr": e})
    adapter = yaml.safe_load((DEPLOY / "prometheus" / "adapter-rules.yaml").read_text())
    for r in adapter["rules"]:
        e = r["metricsQuery"].replace("<<.Series>>", r["name"]["as"]).replace("<<.LabelMatchers>>", 'pod="p"')
        e = e.replace("<<.GroupBy>>", "pod")
        rules.append({"record": f"check:adapter_{len(rules)}", "expr": e})
        if r["name"]["as"] not in metric_list():
            ctx.error(f"adapter rule serves {r['name']['as']}, which is not in deploy/metrics.txt")
    out = ctx.tmp / "promql-rules.yml"
    out.write_text(yaml.safe_dump({"groups": [{"name": "check", "rules": rules}]}))
    p = subprocess.run(["promtool", "check", "rules", str(out)], capture_output=True, text=True)
    if p.returncode != 0:
        ctx.error("promtool rejects a query:\n" + p.stdout + p.stderr)
    print(f"{len(rules)} queries parse (promtool check rules)")


def check_promtool_config(ctx):
    src = DEPLOY / "prometheus" / "prometheus.yml"
    cfg = yaml.safe_load(src.read_text())
    swapped = []
    for job in cfg.get("scrape_configs", []):
        if "kubernetes_sd_configs" in job:
            for sd in job.pop("kubernetes_sd_configs"):
                if sd.get("role") not in ("pod", "endpoints", "endpointslice", "service", "node", "ingress"):
                    ctx.error(f"job {job['job_name']}: kubernetes_sd_configs role {sd.get('role')!r}")
            job.setdefault("static_configs", []).append({"targets": ["localhost:8080"]})
            swapped.append(job["job_name"])
    d = ctx.tmp / "prometheus"
    d.mkdir(exist_ok=True)
    for rf in cfg.get("rule_files", []):
        shutil.copy(src.parent / rf, d / rf)
    (d / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    p = subprocess.run(["promtool", "check", "config", str(d / "prometheus.yml")], capture_output=True, text=True)
    print(p.stdout + p.stderr)
    if p.returncode != 0:
        ctx.error("promtool check config failed")
    if swapped:
        print("kubernetes_sd_configs of " + ", ".join(swapped) + " replaced by static_configs for this check "
              "(Debian's promtool is built without Kubernetes service discovery)")


# ---------------------------------------------------------------------------------------------------------------
# Dockerfile: the builder runs CI's scripts; the runtime stage has the binary's libraries.

def dockerfile_stages():
    """[(stage name, [(instruction, args)])] with line continuations joined."""
    text = (ROOT / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instr, _, rest = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            m = re.search(r"\bAS\s+(\S+)", rest, re.I)
            stages.append((m.group(1) if m else str(len(stages)), []))
        elif stages:
            stages[-1][1].append((instr, rest.strip()))
    return stages


def check_dockerfile(ctx):
    stages = dict(dockerfile_stages())
    for s in ("builder", "runtime"):
        if s not in stages:
            ctx.error(f"Dockerfile has no stage named {s}")
            return
    # What CI runs: .ci/run -> scripts/test.sh -> install-deps.sh and build.sh.
    ci = (ROOT / ".ci" / "run").read_text()
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    if "scripts/test.sh" not in ci:
        ctx.error(".ci/run no longer runs scripts/test.sh: update this check and the Dockerfile together")
    for script in ("scripts/install-deps.sh", "scripts/build.sh"):
        if f"bash {script}" not in test_sh:
            ctx.error(f"scripts/test.sh no longer runs `bash {script}`: the Dockerfile's builder must follow CI")
    runs = [a for i, a in stages["builder"] if i == "RUN"]
    builder_text = " ".join(runs)
    for script in ("scripts/install-deps.sh", "scripts/build.sh"):
        if f"bash {script}" not in builder_text:
            ctx.error(f"the Dockerfile's builder stage does not run `bash {script}` as CI does")
    # No second way to install packages or build in the builder.
    for bad in ("apt-get", "apt ", "cmake ", "make ", "ninja", "pip install"):
        if bad in builder_text:
            ctx.error(f"the builder stage runs `{bad.strip()}` itself; packages and builds go through CI's scripts")
    m = re.search(r"bash scripts/build\.sh([^&;|]*)", builder_text)
    extra = m.group(1).split() if m else []
    for a in extra:
        if not re.fullmatch(r"-DTQ_BUILD_(TESTS|BENCH)=OFF", a):
            ctx.error(f"scripts/build.sh gets {a} in the Dockerfile; only -DTQ_BUILD_TESTS/BENCH=OFF differ from CI")
    print("builder runs: bash scripts/install-deps.sh; bash scripts/build.sh " + " ".join(extra))
    # COPY sources exist (a renamed script would otherwise only break `docker build`).
    for stage, instrs in stages.items():
        for i, a in instrs:
            if i != "COPY" or "--from=" in a:
                continue
            parts = [p for p in a.split() if not p.startswith("--")]
            for src in parts[:-1]:
                if src != "." and not (ROOT / src).exists():
                    ctx.error(f"Dockerfile {stage}: COPY source {src} does not exist")
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        for needed in ("scripts", "deploy", ".git", "CMakeLists.txt"):
            if line and not line.startswith("#") and line.strip("/*") == needed:
                ctx.error(f".dockerignore excludes {needed}, which the build needs")
    # Runtime packages cover every library the binary loads (ldd -> dpkg -S).
    runtime_text = " ".join(a for i, a in stages["runtime"] if i == "RUN")
    m = re.search(r"apt-get install -y --no-install-recommends\s+(.*?)(&&|$)", runtime_text)
    pkgs = set(m.group(1).split()) if m else set()
    if not pkgs:
        ctx.error("cannot find the runtime stage's apt-get install list")
    if not ctx.have_bin():
        ctx.note(f"Dockerfile runtime packages not compared with ldd: no binary at {ctx.bin}")
        return
    if not shutil.which("dpkg"):
        ctx.note("Dockerfile runtime packages not compared with ldd: no dpkg here")
        return
    ldd = subprocess.run(["ldd", str(ctx.bin)], capture_output=True, text=True, check=True).stdout
    libs = sorted({os.path.realpath(m) for m in re.findall(r"=> (/\S+)", ldd)})
    owners = {}
    for lib in libs:
        p = subprocess.run(["dpkg", "-S", lib], capture_output=True, text=True)
        if p.returncode != 0:  # merged /usr: dpkg may know the /lib path only
            alt = lib.replace("/usr/lib/", "/lib/", 1)
            p = subprocess.run(["dpkg", "-S", alt], capture_output=True, text=True)
        if p.returncode != 0:
            ctx.error(f"{lib} (needed by {ctx.bin.name}) belongs to no Debian package")
            continue
        owners[p.stdout.split(":")[0]] = lib
    essential = {"libc6", "libgcc-s1"}  # in every Debian base image
    missing = sorted(set(owners) - pkgs - essential)
    for pkg in missing:
        ctx.error(f"the runtime stage lacks {pkg} ({owners[pkg]}, from `ldd {ctx.bin.name}`)")
    print(f"ldd: {len(libs)} libraries from {len(owners)} packages, all installed by the runtime stage")
    extra_pkgs = sorted(pkgs - set(owners) - {"ca-certificates", "liburing2", "libstdc++6", "zlib1g"})
    if extra_pkgs:
        ctx.note("runtime packages no library of the binary needs: " + ", ".join(extra_pkgs))


# ---------------------------------------------------------------------------------------------------------------
# Kubernetes manifests: cross-references and the deployment rules of docs/deploy.md.

def by_kind(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def probe_path(probe):
    return (probe or {}).get("httpGet", {}).get("path")


def prestop_seconds(c, errors, where):
    ps = c.get("lifecycle", {}).get("preStop")
    if not ps:
        errors.append(f"{where}: no preStop hook")
        return 0
    if "sleep" in ps:
        return int(ps["sleep"]["seconds"])
    cmd = ps.get("exec", {}).get("command", [])
    if len(cmd) == 2 and cmd[0] == "sleep":
        return int(cmd[1])
    errors.append(f"{where}: preStop is not a plain sleep ({cmd}); cannot add up the grace period")
    return 0


def config_of(docs, deployment):
    """The tqserve.yaml text the Deployment mounts, and the container's TQ_CONFIG."""
    spec = deployment["spec"]["template"]["spec"]
    c = [c for c in spec["containers"] if c["name"] == "tqserve"][0]
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    path = env.get("TQ_CONFIG")
    if not path:
        return None, None
    mount = [m for m in c.get("volumeMounts", []) if path.startswith(m["mountPath"].rstrip("/") + "/")]
    if not mount:
        return None, f"TQ_CONFIG={path} is on no volume mount"
    vol = [v for v in spec["volumes"] if v["name"] == mount[0]["name"]]
    if not vol or "configMap" not in vol[0]:
        return None, f"TQ_CONFIG={path} is not on a ConfigMap volume"
    name = vol[0]["configMap"]["name"]
    cms = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == name]
    if not cms:
        return None, f"ConfigMap {name} (TQ_CONFIG) is not in the rendered output"
    key = path[len(mount[0]["mountPath"].rstrip("/")) + 1:]
    if key not in cms[0].get("data", {}):
        return None, f"ConfigMap {name} has no key {key} (TQ_CONFIG={path})"
    return cms[0]["data"][key], None


def check_manifests(ctx):
    seccomp_file = DEPLOY / "k8s" / "seccomp" / "io-uring.json"
    installed_as = "tqserve/io-uring.json"
    for out, docs in ctx.docs().items():
        errs = []
        where = lambda d: f"{out}: {d['kind']}/{d['metadata']['name']}"  # noqa: E731
        deployments = by_kind(docs, "Deployment")
        services = by_kind(docs, "Service")
        for d in deployments:
            w = where(d)
            spec = d["spec"]["template"]["spec"]
            labels = d["spec"]["template"]["metadata"].get("labels", {})
            if not matches(d["spec"]["selector"]["matchLabels"], labels):
                errs.append(f"{w}: selector does not match the pod labels")
            sc = spec.get("securityContext", {})
            if not sc.get("runAsNonRoot"):
                errs.append(f"{w}: runAsNonRoot is not set")
            c = [c for c in spec["containers"] if c["name"] == "tqserve"]
            if not c:
                errs.append(f"{w}: no container named tqserve")
                continue
            c = c[0]
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            for probe, path in (("startupProbe", "/ready"), ("readinessProbe", "/ready"), ("livenessProbe", "/health")):
                p = c.get(probe)
                if probe_path(p) != path:
                    errs.append(f"{w}: {probe} is not an httpGet on {path}")
                elif p["httpGet"]["port"] not in ports and p["httpGet"]["port"] not in ports.values():
                    errs.append(f"{w}: {probe} port {p['httpGet']['port']} is not a container port")
            csc = c.get("securityContext", {})
            if csc.get("allowPrivilegeEscalation") is not False or "ALL" not in csc.get("capabilities", {}).get("drop", []):
                errs.append(f"{w}: the container must not escalate and must drop ALL capabilities")
            env = {e["name"]: e for e in c.get("env", [])}
            prof = sc.get("seccompProfile", {})
            if prof.get("type") == "Localhost":
                if prof.get("localhostProfile") != installed_as or not seccomp_file.exists():
                    errs.append(f"{w}: Localhost profile {prof.get('localhostProfile')} is not the shipped "
                                f"deploy/k8s/seccomp/io-uring.json (installed as {installed_as})")
            elif prof.get("type") == "RuntimeDefault":
                if env.get("TQ_KV_IO_BACKEND", {}).get("value") != "pread":
                    errs.append(f"{w}: under RuntimeDefault (io_uring denied) set TQ_KV_IO_BACKEND=pread")
            else:
                errs.append(f"{w}: seccompProfile must be Localhost (io_uring) or RuntimeDefault (pread)")
            # Grace period >= preStop + drain timeout (the effective one: file, then env, then flags).
            text, err = config_of(docs, d)
            if err:
                errs.append(f"{w}: {err}")
                text = ""
            cfg = yaml.safe_load(text or "") or {}
            drain = float(cfg.get("server", {}).get("drain_timeout_s", 30))
            if "TQ_SERVER_DRAIN_TIMEOUT_S" in env:
                drain = float(env["TQ_SERVER_DRAIN_TIMEOUT_S"]["value"])
            pre = prestop_seconds(c, errs, w)
            grace = spec.get("terminationGracePeriodSeconds", 30)
            if grace < pre + drain:
                errs.append(f"{w}: terminationGracePeriodSeconds {grace} < preStop {pre} s + drain {drain:g} s")
            else:
                print(f"{w}: grace {grace} s >= preStop {pre} s + drain_timeout_s {drain:g} s")
            http = cfg.get("server", {}).get("http_port", 8080)
            if ports.get("http") != http:
                errs.append(f"{w}: container port http {ports.get('http')} != server.http_port {http}")
            grpc = cfg.get("server", {}).get("grpc_port", 50051)
            if grpc and ports.get("grpc") != grpc:
                errs.append(f"{w}: container port grpc {ports.get('grpc')} != server.grpc_port {grpc}")
            lim, req = c.get("resources", {}).get("limits", {}), c.get("resources", {}).get("requests", {})
            if "memory" not in lim or "cpu" not in req:
                errs.append(f"{w}: set a memory limit and a CPU request")
            # Volumes: every mount has a volume, every claim exists.
            vols = {v["name"]: v for v in spec.get("volumes", [])}
            for cc in spec.get("initContainers", []) + spec["containers"]:
                for m in cc.get("volumeMounts", []):
                    if m["name"] not in vols:
                        errs.append(f"{w}: {cc['name']} mounts unknown volume {m['name']}")
            for v in vols.values():
                if "persistentVolumeClaim" in v:
                    claim = v["persistentVolumeClaim"]["claimName"]
                    if not [p for p in by_kind(docs, "PersistentVolumeClaim") if p["metadata"]["name"] == claim]:
                        errs.append(f"{w}: PVC {claim} is not in the output")
                if "configMap" in v and not [m for m in by_kind(docs, "ConfigMap") if m["metadata"]["name"] == v["configMap"]["name"]]:
                    errs.append(f"{w}: ConfigMap {v['configMap']['name']} is not in the output")
            if "cold" not in vols or not ({"ephemeral", "persistentVolumeClaim"} & set(vols["cold"])):
                errs.append(f"{w}: the cold tier (volume cold) must be a PVC or a generic ephemeral volume")
            sa = spec.get("serviceAccountName")
            if sa and not [s for s in by_kind(docs, "ServiceAccount") if s["metadata"]["name"] == sa]:
                errs.append(f"{w}: ServiceAccount {sa} is not in the output")
        for s in services:
            sel = s["spec"].get("selector", {})
            pods = [d for d in deployments if matches(sel, d["spec"]["template"]["metadata"].get("labels", {}))]
            if deployments and not pods:
                errs.append(f"{where(s)}: selector {sel} matches no Deployment's pods")
            for d in pods:
                c = [c for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "tqserve"][0]
                names = {p["name"] for p in c.get("ports", [])}
                for p in s["spec"]["ports"]:
                    if isinstance(p["targetPort"], str) and p["targetPort"] not in names:
                        errs.append(f"{where(s)}: targetPort {p['targetPort']} is not a container port")
        for pdb in by_kind(docs, "PodDisruptionBudget"):
            if not [d for d in deployments if matches(pdb["spec"]["selector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"])]:
                errs.append(f"{where(pdb)}: selector matches no Deployment's pods")
        for hpa in by_kind(docs, "HorizontalPodAutoscaler"):
            ref = hpa["spec"]["scaleTargetRef"]
            if not [d for d in deployments if d["metadata"]["name"] == ref["name"] and ref["kind"] == "Deployment"]:
                errs.append(f"{where(hpa)}: scale target {ref} is not in the output")
            for d in deployments:
                if d["metadata"]["name"] == ref["name"] and "replicas" in d["spec"]:
                    errs.append(f"{where(hpa)}: the Deployment sets replicas, which fights the HPA")
            for m in hpa["spec"]["metrics"]:
                if m["type"] == "Pods" and m["pods"]["metric"]["name"] not in metric_list():
                    errs.append(f"{where(hpa)}: metric {m['pods']['metric']['name']} is not in deploy/metrics.txt")
        for sm in by_kind(docs, "ServiceMonitor"):
            w = where(sm)
            if sm.get("apiVersion") != "monitoring.coreos.com/v1":
                errs.append(f"{w}: apiVersion {sm.get('apiVersion')}")
            sel = sm["spec"]["selector"].get("matchLabels", {})
            svcs = [s for s in services if matches(sel, s["metadata"].get("labels", {}))]
            if not svcs:
                errs.append(f"{w}: selector {sel} matches no Service")
            for e in sm["spec"].get("endpoints", []):
                if set(e) - {"port", "path", "interval", "scrapeTimeout", "scheme", "relabelings", "metricRelabelings", "honorLabels"}:
                    errs.append(f"{w}: unexpected endpoint fields {sorted(set(e))}")
                for s in svcs:
                    if e.get("port") not in {p["name"] for p in s["spec"]["ports"]}:
                        errs.append(f"{w}: port {e.get('port')} is not a port of Service {s['metadata']['name']}")
                if e.get("path", "/metrics") != "/metrics":
                    errs.append(f"{w}: path {e.get('path')}")
        for ds in by_kind(docs, "DaemonSet"):
            for v in ds["spec"]["template"]["spec"].get("volumes", []):
                if "configMap" in v:
                    cm = [m for m in by_kind(docs, "ConfigMap") if m["metadata"]["name"] == v["configMap"]["name"]]
                    if not cm:
                        errs.append(f"{where(ds)}: ConfigMap {v['configMap']['name']} is not in the output")
                    elif cm[0]["data"].get("io-uring.json") != seccomp_file.read_text():
                        errs.append(f"{where(ds)}: the profile it installs differs from deploy/k8s/seccomp/io-uring.json")
        kinds = sorted({d["kind"] for d in docs})
        print(f"{out}: {len(docs)} objects ({', '.join(kinds)}): {'ok' if not errs else 'FAILED'}")
        for e in errs:
            ctx.error(e)


# ---------------------------------------------------------------------------------------------------------------
# The seccomp profile.

REQUIRED = {"io_uring_setup", "io_uring_enter", "io_uring_register"}
NEVER = {  # what RuntimeDefault keeps from unprivileged containers, and a pod with no capabilities never needs
    "mount", "umount", "umount2", "unshare", "setns", "ptrace", "process_vm_readv", "process_vm_writev", "bpf",
    "perf_event_open", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff", "chroot", "pivot_root", "keyctl", "add_key", "request_key", "userfaultfd", "acct",
    "open_by_handle_at", "settimeofday", "clock_settime", "quotactl", "lookup_dcookie", "fsopen", "fsmount",
    "move_mount", "open_tree", "fspick", "fsconfig", "syslog", "vhangup", "iopl", "ioperm", "kcmp", "pidfd_getfd",
    "sethostname", "setdomainname", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl", "get_mempolicy", "mbind",
    "set_mempolicy", "move_pages", "clone3",
}


def known_syscalls():
    names = set()
    for h in ("asm/unistd_64.h", "asm/unistd_32.h", "asm/unistd_x32.h"):
        for d in ("/usr/include/x86_64-linux-gnu", "/usr/include"):
            p = Path(d) / h
            if p.exists():
                names |= set(re.findall(r"#define __NR_(\w+)", p.read_text()))
                break
    return names


def check_seccomp(ctx):
    path = DEPLOY / "k8s" / "seccomp" / "io-uring.json"
    prof = json.loads(path.read_text())
    if prof.get("defaultAction") not in ("SCMP_ACT_ERRNO", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL"):
        ctx.error(f"defaultAction {prof.get('defaultAction')}: the profile must deny what it does not list")
    if "SCMP_ARCH_X86_64" not in prof.get("architectures", []):
        ctx.error("architectures lack SCMP_ARCH_X86_64")
    unconditional, conditional, seen = set(), set(), {}
    for rule in prof["syscalls"]:
        for n in rule["names"]:
            if rule["action"] == "SCMP_ACT_ALLOW":
                (conditional if rule.get("args") else unconditional).add(n)
            if n in seen and not rule.get("args") and rule["action"] == seen[n]:
                ctx.error(f"{n} is listed twice")
            seen[n] = rule["action"]
        if rule["action"] not in ("SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO"):
            ctx.error(f"unexpected action {rule['action']} for {rule['names']}")
        if set(rule) - {"names", "action", "args", "comment", "errnoRet"}:
            ctx.error(f"{rule['names']}: fields {sorted(set(rule))} (no includes/excludes: every runtime reads this)")
    if REQUIRED - unconditional:
        ctx.error(f"{sorted(REQUIRED - unconditional)} are not allowed: the profile's reason to exist")
    bad = (unconditional | conditional) & NEVER
    if bad:
        ctx.error(f"allows {sorted(bad)}, which RuntimeDefault denies to unprivileged containers")
    if "clone" in unconditional:
        ctx.error("clone is allowed without the namespace-flag condition")
    if seen.get("clone3") != "SCMP_ACT_ERRNO":
        ctx.error("clone3 must answer ENOSYS (errno) so that the C library falls back to clone")
    known = known_syscalls()
    if known:
        unknown = sorted((unconditional | conditional) - known)
        if unknown:
            ctx.error(f"not syscalls on x86 (kernel headers): {unknown}")
    else:
        ctx.note("seccomp names not checked against kernel headers: no asm/unistd_64.h")
    for need in ("read", "write", "openat", "mmap", "futex", "epoll_wait", "accept4", "socket", "pread64",
                 "pwrite64", "fallocate", "fsync", "mlock", "clone", "exit_group", "rt_sigreturn", "arch_prctl"):
        if need not in unconditional | conditional:
            ctx.error(f"{need} is not allowed; the daemon needs it")
    print(f"{len(unconditional)} syscalls allowed, {len(conditional)} with argument conditions; io_uring allowed; "
          f"none of the {len(NEVER)} denied-by-default ones")


# ---------------------------------------------------------------------------------------------------------------
# The ConfigMap's config and the Deployment's TQ_* env, accepted by the real binary.

def pending_options():
    return [l.strip() for l in (DEPLOY / "pending-options.txt").read_text().splitlines()
            if l.strip() and not l.startswith("#")]


def env_name(option):
    return "TQ_" + option.replace(".", "_").upper()


def strip_option(cfg, option):
    section, key = option.split(".", 1)
    if isinstance(cfg.get(section), dict) and key in cfg[section]:
        del cfg[section][key]
        if not cfg[section]:
            del cfg[section]
        return True
    return False


def quantity(q):
    q = str(q)
    if q.endswith("m"):
        return float(q[:-1]) / 1000
    return float(q)


def deployment_env(c):
    """The container's TQ_* variables as the kubelet would set them."""
    env = {}
    for e in c.get("env", []):
        if not e["name"].startswith("TQ_"):
            continue
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "resourceFieldRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["resourceFieldRef"]
            kind, res = ref["resource"].split(".", 1)
            val = c["resources"][kind][res]
            env[e["name"]] = str(math.ceil(quantity(val) / quantity(ref.get("divisor", "1"))))
        else:
            raise Failed(f"cannot evaluate env {e['name']}")
    return env


def prepared_configs(ctx):
    """[(where, config path, env)] for every tqserve Deployment, pending options stripped where the binary lacks them."""
    help_text = subprocess.run([str(ctx.bin), "serve", "--help"], capture_output=True, text=True).stdout
    unknown = [o for o in pending_options() if f"[{o}," not in help_text]
    for o in pending_options():
        if o not in unknown:
            ctx.note(f"{o} is now an option of tqserve: remove it from deploy/pending-options.txt")
    out = []
    for name, docs in ctx.docs().items():
        for d in by_kind(docs, "Deployment"):
            c = [c for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "tqserve"]
            if not c:
                continue
            text, err = config_of(docs, d)
            if err:
                raise Failed(err)
            cfg = yaml.safe_load(text) or {}
            env = deployment_env(c[0])
            for o in unknown:
                in_file = strip_option(cfg, o)
                in_env = env.pop(env_name(o), None) is not None
                if in_file or in_env:
                    ctx.note(f"PENDING: {o} is set in deploy/k8s but is not an option of tqserve yet; until it is, "
                             f"the daemon refuses the shipped config (stripped here to check the rest)")
            p = ctx.tmp / f"tqserve-{name}.yaml"
            p.write_text(yaml.safe_dump(cfg))
            out.append((f"{name}: Deployment/{d['metadata']['name']}", p, env))
    return out


def check_config(ctx):
    if not ctx.have_bin():
        ctx.note(f"config not checked by the binary: no tqserve at {ctx.bin}")
        print("skipped: no binary")
        return
    for where, path, env in prepared_configs(ctx):
        full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(ctx.tmp), **env}
        p = subprocess.run([str(ctx.bin), "serve", "--config", str(path), "--print-config"], env=full,
                           capture_output=True, text=True)
        if p.returncode != 0:
            ctx.error(f"{where}: tqserve refuses its config or env: {p.stderr.strip() or p.stdout.strip()}")
            continue
        eff = yaml.safe_load(p.stdout)
        print(f"{where}: accepted; drain_timeout_s {eff['server']['drain_timeout_s']}, threads {eff['engine']['threads']}, "
              f"ctx {eff['engine']['ctx_size']} x running {eff['engine']['max_running']}")


# ---------------------------------------------------------------------------------------------------------------
# Smoke: the entrypoint starts the daemon with the production config, probes answer, metrics are there, SIGTERM drains.

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=2):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None, ""


def check_smoke(ctx):
    if not ctx.have_bin():
        ctx.note(f"entrypoint smoke run skipped: no tqserve at {ctx.bin}")
        print("skipped: no binary")
        return
    entry = ROOT / "scripts" / "docker-entrypoint.sh"
    # The default model's file name: the first `name="..."` of fetch-model.sh (its no-argument case).
    name = re.search(r'^\s*name="(.*)"$', (ROOT / "scripts" / "fetch-model.sh").read_text(), re.M).group(1)
    model_dir = Path(os.environ.get("TQ_MODEL_DIR", Path.home() / ".cache" / "tqserve" / "models"))
    if not (model_dir / name).is_file():
        ctx.note(f"entrypoint smoke run skipped: {model_dir / name} is absent (scripts/fetch-model.sh fetches it)")
        print("skipped: no model")
        return
    configs = [c for c in prepared_configs(ctx) if c[0].startswith("overlays_production")] or prepared_configs(ctx)
    where, cfg_path, env = configs[0]
    # The image's layout, with this checkout's files; TQ_MODEL_DIR is the image's volume (here a symlink to the model).
    models = ctx.tmp / "models"
    models.mkdir(exist_ok=True)
    if not (models / name).exists():
        (models / name).symlink_to(model_dir / name)
    port = free_port()
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(ctx.tmp), **env,
            "TQ_CONFIG": str(cfg_path), "TQ_MODEL_DIR": str(models), "TQ_ENGINE_THREADS": "2",
            "TQSERVE_BIN": str(ctx.bin), "TQSERVE_SCRIPTS_DIR": str(ROOT / "scripts"),
            "TQSERVE_BAKED_MODEL_DIR": str(ctx.tmp / "baked"), "TQSERVE_HEALTH_PORT": str(port)}
    log = open(ctx.tmp / "smoke.log", "w")
    proc = subprocess.Popen(["bash", str(entry), "serve", "--http-port", str(port), "--grpc-port", "0",
                             "--drain-timeout", "5"], env=full, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            if subprocess.run(["bash", str(entry), "health"], env=full).returncode == 0:
                break
            if proc.poll() is not None:
                raise Failed(f"the daemon exited with {proc.returncode}: " + (ctx.tmp / "smoke.log").read_text()[-2000:])
            time.sleep(0.3)
        else:
            raise Failed("`docker-entrypoint.sh health` did not pass within 60 s")
        print(f"{where}: started through docker-entrypoint.sh; `docker-entrypoint.sh health` passes")
        # /health is liveness (200 while the model loads); /ready turns 200 once it is loaded and checked.
        ready_by = time.time() + 60
        while (status := get(f"http://127.0.0.1:{port}/ready")[0]) != 200 and time.time() < ready_by:
            time.sleep(0.3)
        if status != 200:
            ctx.error(f"/ready answered {status} 60 s after /health passed")
        # One short completion, so that labelled families (requests by outcome) have a sample to show.
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", method="POST",
                                     data=json.dumps({"prompt": "Hello", "max_tokens": 2}).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                if r.status != 200:
                    ctx.error(f"/v1/completions answered {r.status}")
        except urllib.error.HTTPError as e:
            raise Failed(f"/v1/completions answered {e.code}: {e.read()[:300]!r}; the daemon's log ends: "
                         + (ctx.tmp / "smoke.log").read_text()[-2000:])
        status, body = get(f"http://127.0.0.1:{port}/metrics")
        exported = {m for m in re.findall(r"^# TYPE (\S+) (\S+)", body, re.M)}
        names = {n for n, _ in exported}
        for n, (kind, st) in metric_list().items():
            if st == "today" and n not in names:
                ctx.error(f"deploy/metrics.txt lists {n} as exported today, but /metrics has no such metric")
            if st == "today" and n in names and (n, kind) not in exported:
                ctx.error(f"{n} is a {dict(exported)[n]} in /metrics, a {kind} in deploy/metrics.txt")
            if st == "kv-manager" and n in names:
                ctx.note(f"{n} is exported now: mark it 'today' in deploy/metrics.txt")
        print(f"/metrics: every 'today' name of deploy/metrics.txt is exported ({len(names)} metrics)")
        t0 = time.time()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        if rc != 0:
            ctx.error(f"after SIGTERM the daemon exited with {rc}")
        print(f"SIGTERM: exited {rc} after {time.time() - t0:.1f} s")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


CHECKS = {
    "metrics": check_metrics, "promql": check_promql, "promtool-config": check_promtool_config,
    "dockerfile": check_dockerfile, "manifests": check_manifests, "seccomp": check_seccomp,
    "config": check_config, "smoke": check_smoke,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=sorted(CHECKS))
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--bin")
    ap.add_argument("rendered", nargs="*")
    args = ap.parse_intermixed_args()
    ctx = Ctx(args)
    try:
        CHECKS[args.check](ctx)
    except Failed as e:
        ctx.error(str(e))
    for e in ctx.errors:
        print("error: " + e)
    return 1 if ctx.errors else 0


if __name__ == "__main__":
    sys.exit(main())
