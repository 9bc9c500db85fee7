"""Render ``deploy/kubernetes`` with ``kubectl kustomize`` and look objects up in the result.

``render_all()`` renders every variant at once (one ``kubectl`` process each, side by side)
and returns ``{variant: [object dict, …]}``; ``Render`` wraps one variant's objects.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE = ROOT / "deploy" / "kubernetes"
VARIANTS = {
    "base": KUSTOMIZE / "base",
    "single-replica": KUSTOMIZE / "overlays" / "single-replica",
    "with-redis": KUSTOMIZE / "overlays" / "with-redis",
}
MONITORED = "with-redis+servicemonitor"
"""A variant the tests compose as a user would: with-redis plus the ServiceMonitor component."""
MIN_KUSTOMIZE_MAJOR = 4
"""Components (``kind: Component``) need kustomize ≥ 3.7; kubectl ≥ 1.21 embeds v4+."""


def kubectl_problem() -> str | None:
    """Why this machine cannot render the manifests (``make kubectl`` installs kubectl), or
    None when it can."""
    binary = shutil.which("kubectl")
    if binary is None:
        return "kubectl is not installed (`make kubectl` installs it as root)"
    import subprocess

    out = subprocess.run([binary, "version", "--client", "-o", "json"], capture_output=True,
                         text=True, timeout=30, check=False).stdout
    version = json.loads(out or "{}").get("kustomizeVersion", "v0")
    major = int(version.lstrip("v").split(".")[0] or 0)
    if major < MIN_KUSTOMIZE_MAJOR:
        return f"kubectl's kustomize {version} is older than v{MIN_KUSTOMIZE_MAJOR} (components)"
    return None


def write_monitored(folder: Path) -> Path:
    """A kustomization in ``folder``: the with-redis overlay plus the ServiceMonitor component
    (kustomize takes only relative paths to other kustomizations)."""
    rel = lambda path: os.path.relpath(path, folder)  # noqa: E731
    (folder / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [rel(VARIANTS["with-redis"])],
        "components": [rel(KUSTOMIZE / "components" / "servicemonitor")]}))
    return folder


async def _render(directory: Path) -> list[dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "kustomize", str(directory), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed:\n{err.decode()}")
    return [doc for doc in yaml.safe_load_all(out) if doc]


def render_all(scratch: Path) -> dict[str, list[dict[str, Any]]]:
    """Every variant's rendered objects; ``scratch`` holds the composed monitored variant."""
    dirs = {**VARIANTS, MONITORED: write_monitored(scratch)}

    async def main() -> list[list[dict[str, Any]]]:
        return await asyncio.gather(*(_render(d) for d in dirs.values()))

    return dict(zip(dirs, asyncio.run(main()), strict=True))


@dataclass(frozen=True)
class Render:
    """One variant's rendered objects."""

    objects: list[dict[str, Any]]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str) -> dict[str, Any]:
        found = [o for o in self.all(kind) if o["metadata"]["name"] == name]
        assert len(found) == 1, f"{len(found)} {kind} named {name!r}"
        return found[0]

    def router(self) -> dict[str, Any]:
        return self.one("Deployment", "llmroute")

    def container(self) -> dict[str, Any]:
        return self.router()["spec"]["template"]["spec"]["containers"][0]

    def mount_of(self, volume_kind: str, name: str) -> str:
        """Where the router mounts the volume of ``volume_kind`` (``configMap``/``secret``)
        whose object is ``name``."""
        volumes = self.router()["spec"]["template"]["spec"]["volumes"]
        vol = next(v["name"] for v in volumes
                   if v.get(volume_kind, {}).get("name") == name)
        return next(m["mountPath"] for m in self.container()["volumeMounts"] if m["name"] == vol)

    def configmap(self, prefix: str) -> dict[str, Any]:
        """The ConfigMap generated as ``prefix`` (its name may carry a content hash)."""
        found = [o for o in self.all("ConfigMap")
                 if o["metadata"]["name"] == prefix
                 or o["metadata"]["name"].rsplit("-", 1)[0] == prefix]
        assert len(found) == 1, f"{len(found)} ConfigMaps named {prefix}[-hash]"
        return found[0]
