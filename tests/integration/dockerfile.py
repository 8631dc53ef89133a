"""Replay the Dockerfile's build of one target without a Docker engine (there is none on the test machines).

`Dockerfile` is read instruction by instruction. A target is a final stage (the last one by default,
or the one `docker build --target NAME` names); its build stages are the stage it copies from
(`COPY --from=`) and the stages that one is built `FROM`, in order. Their COPY lines reproduce the
file set (the build context filtered by `.dockerignore`, with Docker's matching rules) under a
temporary root, their RUN lines run as Docker runs shell-form RUN (`/bin/sh -c LINE`) with the image's
absolute paths mapped under that root, with the ENV and WORKDIR each stage inherits, and everything
the final stage does not `COPY --from` them is then deleted, so that what is left is what the image
holds. Steps that change the operating system rather than the Python install (apt-get, groupadd,
useradd) cannot run without root and are not replayed: this machine's Python and compiler stand in
for the base image's.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

# the RUN commands that change the OS image (and need root); replayed by nothing
SYSTEM_STEPS = ("apt-get", "groupadd", "useradd")
# system paths the image uses as they are on any Linux machine
SYSTEM_PATHS = ("/tmp", "/usr/sbin/nologin", "/var/lib/apt/lists")
ABS_PATH = re.compile(r"(?<![\w.$-])(/[\w.*-]+(?:/[\w.*-]*)*)")
# What python:3.11-slim (Debian bookworm) has besides the image's own files: glibc, and the C++, GCC and
# zlib runtimes that apt itself needs. A library outside these must come from the virtualenv (wheels vendor
# theirs) or from a package the final stage installs, each with the libraries it provides.
BASE_LIBRARIES = frozenset({"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libutil.so.1",
                            "libresolv.so.2", "ld-linux-x86-64.so.2", "libgcc_s.so.1", "libstdc++.so.6", "libz.so.1"})
RUNTIME_PACKAGES = {"libgomp1": frozenset({"libgomp.so.1"})}  # LightGBM's OpenMP runtime


def apt_packages(stage_text: str) -> list[str]:
    """The packages of every `apt-get install` in a stage's RUN lines (options left out)."""
    found = re.findall(r"apt-get install((?:\s+[\w.+-]+)+)", stage_text)
    return [w for group in found for w in group.split() if not w.startswith("-")]


@dataclass
class Stage:
    base: str
    name: str | None
    steps: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, its text)

    def all(self, instruction: str) -> list[str]:
        return [text for ins, text in self.steps if ins == instruction]


def parse(text: str) -> list[Stage]:
    """The Dockerfile's stages, continuation lines joined and comments dropped."""
    lines, held = [], ""
    for raw in text.splitlines():
        if not held and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.rstrip().endswith("\\"):
            held += raw.rstrip()[:-1] + " "
            continue
        lines.append(held + raw.strip())
        held = ""
    stages: list[Stage] = []
    for line in lines:
        ins, _, rest = line.partition(" ")
        ins, rest = ins.upper(), " ".join(rest.split())
        if ins == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        else:
            stages[-1].steps.append((ins, rest))
    return stages


def _pattern(p: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex over slash-separated paths relative to the context."""
    out, i = "", 0
    while i < len(p):
        if p.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif p.startswith("**", i):
            out, i = out + ".*", i + 2
        elif p[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif p[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(p[i]), i + 1
    return re.compile(out + r"\Z")


def ignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(is an exception `!`, pattern) per line of a .dockerignore, in order (the last match wins)."""
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        line = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        rules.append((keep, _pattern(line)))
    return rules


def ignored(rel: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether Docker leaves `rel` out of the context: a pattern matching it or one of its parents."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    out = False
    for keep, rx in rules:
        if any(rx.match(p) for p in prefixes):
            out = not keep
    return out


def context_files(root: str, rules: list[tuple[bool, re.Pattern[str]]]) -> list[str]:
    """Every file of the build context rooted at `root`, relative, as Docker would send it."""
    files, exceptions = [], any(keep for keep, _ in rules)
    for here, dirs, names in os.walk(root):
        rel_here = os.path.relpath(here, root)
        rel = "" if rel_here == "." else rel_here + "/"
        if not exceptions:  # without `!` lines an ignored folder holds nothing that comes back
            dirs[:] = [d for d in dirs if not ignored(rel + d, rules)]
        files += [rel + n for n in names if not ignored(rel + n, rules)]
    return sorted(files)


def build_chain(stages: list[Stage], final: Stage) -> list[Stage]:
    """The stages `final` copies from, each after the stages it is built `FROM`: the order they build in."""
    by_name = {s.name: s for s in stages if s.name}
    sources = {t.split()[0].split("=", 1)[1] for t in final.all("COPY") if t.startswith("--from=")}
    assert len(sources) == 1, f"the replay knows a final stage that copies from one build stage, not {sorted(sources)}"
    chain = [by_name[sources.pop()]]
    while chain[0].base in by_name:
        chain.insert(0, by_name[chain[0].base])
    return chain


class Replay:
    """One emulated `docker build [--target TARGET]` of `context`/Dockerfile, its image's file system
    under the folder `root`."""

    def __init__(self, context: str, root: str, target: str | None = None):
        self.context, self.root = context, root
        with open(os.path.join(context, "Dockerfile"), encoding="utf-8") as fh:
            self.stages = parse(fh.read())
        with open(os.path.join(context, ".dockerignore"), encoding="utf-8") as fh:
            self.rules = ignore_rules(fh.read())
        named = [s for s in self.stages if target is not None and s.name == target]
        assert target is None or named, f"the Dockerfile has no stage {target!r}"
        self.final = named[0] if named else self.stages[-1]
        self.builds = build_chain(self.stages, self.final)
        # the paths the image owns: the build stages' folders and what the final stage takes from them
        self.kept = [shlex.split(t)[-1] for t in self.final.all("COPY") if t.startswith("--from=")]
        self.owned = sorted({*self.build_steps("WORKDIR"), *self.kept}, key=len, reverse=True)
        self.copied: list[str] = []  # context files the build stages copied in

    def build_steps(self, instruction: str) -> list[str]:
        """Every `instruction` of the build stages, in build order."""
        return [text for stage in self.builds for text in stage.all(instruction)]

    def host(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def map_paths(self, text: str) -> str:
        """`text` with every absolute path the image owns moved under the root; others must be system ones."""
        def sub(m: re.Match[str]) -> str:
            p = m.group(1)
            for own in self.owned:
                if p == own or p.startswith(own.rstrip("/") + "/"):
                    return self.host(p)
            if p.startswith(SYSTEM_PATHS):
                return p
            raise AssertionError(f"the replay does not know where {p} lives in the image; add it to "
                                 f"tests/integration/dockerfile.py (owned: {self.owned})")
        return ABS_PATH.sub(sub, text)

    def env(self, stage: Stage, base: dict[str, str], drop: tuple[str, ...] = ()) -> dict[str, str]:
        env = dict(base)
        for text in stage.all("ENV"):
            words = shlex.split(text)
            pairs = [w.split("=", 1) for w in words] if "=" in words[0] else [[words[0], " ".join(words[1:])]]
            for k, v in pairs:
                if k not in drop:
                    env[k] = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), self.map_paths(v))
        return env

    def copy(self, text: str, workdir: str, files: list[str]) -> list[str]:
        """One COPY of the build stage: context paths (after .dockerignore) into the image; Docker's rules."""
        *srcs, dest = shlex.split(text)
        assert not any(s.startswith("--") for s in srcs), f"COPY flags are not replayed: {text}"
        target = self.host(dest) if dest.startswith("/") else os.path.join(workdir, dest)
        copied = []
        for src in map(os.path.normpath, srcs):
            if src in files:  # a file: into a folder when dest says so, else as dest
                into = dest.endswith("/") or len(srcs) > 1
                pairs = [(src, os.path.join(target, os.path.basename(src)) if into else target)]
            else:  # a folder (or the whole context): its contents into dest
                pairs = [(rel, os.path.join(target, rel if src == "." else rel[len(src) + 1:]))
                         for rel in files if src == "." or rel.startswith(src + "/")]
            assert pairs, f"COPY {src}: not in the build context (left out by .dockerignore?)"
            for rel, out in pairs:
                os.makedirs(os.path.dirname(out), exist_ok=True)
                shutil.copy2(os.path.join(self.context, rel), out, follow_symlinks=False)
                copied.append(rel)
        return copied

    def run_build(self, base_env: dict[str, str], drop_env: tuple[str, ...]) -> list[str]:
        """Every replayed RUN of the build stages, in order; returns their (mapped) command lines."""
        bindir = self.host("/usr/local/bin")  # the base image's python, played by this machine's
        os.makedirs(bindir, exist_ok=True)
        for name in ("python", "python3"):
            os.symlink(os.path.realpath(getattr(sys, "_base_executable", sys.executable)), os.path.join(bindir, name))
        env = {**base_env, "PATH": bindir + os.pathsep + base_env["PATH"]}
        workdir = self.host("/")
        files = context_files(self.context, self.rules)
        ran = []
        for stage in self.builds:  # a stage built FROM another keeps its ENV and WORKDIR
            env = self.env(stage, env, drop_env)
            for ins, text in stage.steps:
                workdir = self._step(ins, text, env, workdir, files, ran)
        return ran

    def _step(self, ins: str, text: str, env: dict[str, str], workdir: str, files: list[str], ran: list[str]) -> str:
        """One instruction of a build stage; returns the working folder after it."""
        if ins == "WORKDIR":
            workdir = self.host(text)
            os.makedirs(workdir, exist_ok=True)
        elif ins == "COPY":
            self.copied += self.copy(text, workdir, files)
        elif ins == "RUN" and not text.startswith(SYSTEM_STEPS):
            line = self.map_paths(text)
            r = subprocess.run(["/bin/sh", "-c", line], cwd=workdir, env=env, capture_output=True, text=True,
                               timeout=1200)
            assert r.returncode == 0, f"RUN {text}\nexit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            ran.append(line)
        return workdir

    def keep_only_the_final_stage(self) -> None:
        """Delete what the final stage does not copy from the build stages (sources, wheels, caches).

        The python under /usr/local/bin stays: the final stage's base image has the same one there."""
        for own in self.build_steps("WORKDIR"):
            if not any(k == own or k.startswith(own.rstrip("/") + "/") for k in self.kept):
                shutil.rmtree(self.host(own), ignore_errors=True)

    def entrypoint(self) -> list[str]:
        text = self.final.all("ENTRYPOINT")[-1]
        return list(json.loads(text))
