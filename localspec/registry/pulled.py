"""Pulled aliases: one JSON manifest per alias records its verified files, so that `run -m ALIAS`,
`models` and `rm` work without the network."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import platformdirs

from localspec.backend.hardware import total_memory_bytes
from localspec.errors import LocalspecError
from localspec.json_file import write_json
from localspec.registry import hub
from localspec.registry.aliases import (
    ALIAS_NAME,
    APP_NAME,
    Alias,
    FileSpec,
    check_alias_name,
    load_registry,
)
from localspec.registry.remote import DownloadProgress, RemoteFile

ROLES = ("target", "draft")


@dataclass
class PulledFile:
    repo: str
    path: str  # inside the repo
    local: str  # where it lies on disk
    size: int
    sha256: str | None


@dataclass
class Manifest:
    alias: str
    files: dict[str, list[PulledFile]] = field(default_factory=dict)  # role -> files

    def local_path(self, role: str) -> Path | None:
        """The file to load for a role (the first part of a split model), if all of it is on disk."""
        files = self.files.get(role) or []
        if not files or not all(Path(f.local).is_file() for f in files):
            return None
        return Path(files[0].local)

    def size_bytes(self) -> int:
        return sum(
            Path(f.local).stat().st_size for fs in self.files.values() for f in fs if Path(f.local).is_file()
        )


def manifests_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME)) / "pulled"


class DamagedRecord(LocalspecError):
    """A pulled record that cannot be read back; `pull` of its alias rewrites it."""


def record_path(alias: str) -> Path:
    """Where an alias's record lives; never outside the records' folder, whatever the name."""
    try:
        check_alias_name(alias)
    except ValueError as e:
        raise LocalspecError(f"{alias!r}: {e}") from None
    folder = manifests_dir()
    path = folder / f"{alias}.json"
    if path.resolve().parent != folder.resolve():
        raise LocalspecError(f"{alias!r} would name a file outside {folder}")
    return path


def read_manifest(alias: str) -> Manifest | None:
    path = record_path(alias)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Manifest(
            data["alias"], {role: [PulledFile(**f) for f in files] for role, files in data["files"].items()}
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise DamagedRecord(
            f"the record of pulled alias {alias!r} is damaged ({path}): pull it again"
        ) from None


def write_manifest(manifest: Manifest) -> None:
    data = {
        "alias": manifest.alias,
        "files": {r: [asdict(f) for f in fs] for r, fs in manifest.files.items()},
    }
    write_json(record_path(manifest.alias), data)


def read_manifest_or_none(alias: str) -> Manifest | None:
    """The record, or None when it is missing or damaged (a damaged one is as good as none)."""
    try:
        return read_manifest(alias)
    except DamagedRecord:
        return None


def all_manifests() -> list[Manifest]:
    """Every readable record (damaged ones are left out: they are repaired by pulling again)."""
    folder = manifests_dir()
    if not folder.is_dir():
        return []
    found = (
        read_manifest_or_none(p.stem) for p in sorted(folder.glob("*.json")) if ALIAS_NAME.fullmatch(p.stem)
    )
    return [m for m in found if m is not None]


@dataclass
class PullPlan:
    files: dict[str, list[RemoteFile]]
    specs: dict[str, FileSpec]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for fs in self.files.values() for f in fs)


def plan_pull(alias: Alias, offline: bool, cache_dir: Path | None = None) -> PullPlan:
    """What to download: the alias's files on the Hub (those it names on this machine need none)."""
    specs = {"target": alias.target, **({"draft": alias.draft} if alias.draft else {})}
    specs = {role: spec for role, spec in specs.items() if spec.local is None}
    files: dict[str, list[RemoteFile]] = {}
    for role, spec in specs.items():
        if offline:
            known = read_manifest_or_none(alias.name)
            if known and known.files.get(role):
                files[role] = [RemoteFile(f.path, f.size, f.sha256) for f in known.files[role]]
                continue
            listing = hub.cached_repo_files(spec, cache_dir)
            if not listing:
                raise LocalspecError(f"offline (HF_HUB_OFFLINE) and {spec.repo} is not in the local cache")
            files[role] = hub.resolve_files(spec, listing)
        else:
            files[role] = hub.resolve_files(spec, hub.list_repo_files(spec))
    return PullPlan(files, specs)


def _on_disk(spec: FileSpec, remote: RemoteFile, local_dir: Path | None) -> bool:
    if local_dir is not None:
        path = local_dir / remote.path
        return path.is_file() and path.stat().st_size == remote.size
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(spec.repo, remote.path, revision=spec.revision)
    return isinstance(cached, str) and Path(cached).stat().st_size == remote.size


def check_space(plan: PullPlan, dest: Path, local_dir: Path | None = None) -> list[str]:
    """Refuse when the disk cannot hold what is still to download; return warnings (memory)."""
    dest.mkdir(parents=True, exist_ok=True)
    missing = sum(
        f.size for role, fs in plan.files.items() for f in fs if not _on_disk(plan.specs[role], f, local_dir)
    )
    free = shutil.disk_usage(dest).free
    if missing > free:
        raise LocalspecError(
            f"not enough disk space in {dest}: {missing / 1e9:.1f} GB to download, {free / 1e9:.1f} GB free"
        )
    memory = total_memory_bytes()
    if memory and plan.total_bytes > memory:
        return [
            f"the models ({plan.total_bytes / 1e9:.1f} GB) exceed this machine's memory "
            f"({memory / 1e9:.1f} GB): they will run slowly, if at all"
        ]
    return []


def fetch(
    alias: Alias,
    plan: PullPlan,
    progress: DownloadProgress,
    local_dir: Path | None = None,
    cache_dir: Path | None = None,
    check: bool = False,
) -> Manifest:
    """Download every planned file, verify sizes and sha256, and record the manifest. Files pulled
    before are checked by size (and with `check`, by sha256 too); a wrong one is fetched again."""
    previous = read_manifest_or_none(alias.name)  # a damaged record is rewritten below
    verified = {
        (f.repo, f.path, f.local, f.size, f.sha256)
        for fs in (previous.files.values() if previous else [])
        for f in fs
    }
    manifest = Manifest(alias.name)
    for role, files in plan.files.items():
        spec = plan.specs[role]
        manifest.files[role] = []
        for remote in files:
            path = hub.download(spec, remote, progress, local_dir, cache_dir)
            seen = (spec.repo, remote.path, str(path), path.stat().st_size, remote.sha256)
            if (check or seen not in verified) and _problem(path, remote, progress):
                hub.remove_downloaded(path)  # damaged since (or never right): fetch it once more
                path = hub.download(spec, remote, progress, local_dir, cache_dir)
                _verify(path, remote, progress)
            manifest.files[role].append(
                PulledFile(spec.repo, remote.path, str(path), path.stat().st_size, remote.sha256)
            )
    write_manifest(manifest)
    return manifest


def _problem(path: Path, remote: RemoteFile, progress: DownloadProgress) -> str | None:
    """What is wrong with a downloaded file against the Hub's size and sha256 (None: nothing)."""
    size = path.stat().st_size
    if remote.size and size != remote.size:
        return f"size {size} instead of {remote.size}"
    if remote.sha256:
        label = f"verify {Path(remote.path).name}"
        progress.file_started(label, size, 0)
        digest = hub.sha256_of(path, lambda n: progress.file_advanced(label, n))
        progress.file_finished(label, size)
        if digest != remote.sha256:
            return "sha256 mismatch"
    return None


def _verify(path: Path, remote: RemoteFile, progress: DownloadProgress) -> None:
    problem = _problem(path, remote, progress)
    if problem:
        hub.remove_downloaded(path)
        raise LocalspecError(f"{remote.path} failed verification ({problem}): removed it; pull again")


def remove_alias(name: str) -> tuple[int, list[str]]:
    """Delete an alias's files except those another pulled alias uses; return (bytes freed, kept).
    A damaged record names no files it could safely delete: only the record goes."""
    try:
        manifest = read_manifest(name)
    except DamagedRecord:
        record_path(name).unlink()
        return 0, []
    if manifest is None:
        load_registry().get(name)  # a name no registry knows is said to be unknown, with the closest
        raise LocalspecError(f"{name!r} is not pulled")
    others = [f for m in all_manifests() if m.alias != name for fs in m.files.values() for f in fs]
    # The huggingface_hub cache stores identical files once: compare blobs, not only paths.
    in_use = {str(Path(f.local).resolve()) for f in others} | {f.local for f in others}
    freed, kept = 0, []
    for files in manifest.files.values():
        for f in files:
            path = Path(f.local)
            real = path.resolve()
            if f.local in in_use or str(real) in in_use:
                kept.append(f.path)
                if path.is_symlink() and f.local not in in_use:
                    path.unlink()
                continue
            if real.exists():
                freed += real.stat().st_size
            hub.remove_downloaded(path)
    record_path(name).unlink(missing_ok=True)
    return freed, kept
