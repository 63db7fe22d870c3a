"""Resolve and download GGUF files from the Hugging Face Hub through huggingface_hub (its cache,
HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE apply as everywhere), with sha256 verification."""

from __future__ import annotations

import errno
import functools
import hashlib
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from localspec.backend.gguf_file import SPLIT_RE
from localspec.errors import LocalspecError
from localspec.registry.aliases import FileSpec
from localspec.registry.blobs import fetch_blob
from localspec.registry.remote import DownloadProgress, RemoteFile

QUANT_NAME_RE = re.compile(
    r"(?<![A-Za-z0-9])((?:I?Q\d(?:_[A-Z0-9]+)*)|BF16|F16|F32)(?![A-Za-z0-9])", re.IGNORECASE
)


def _quant_re(quant: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(quant)}(?![A-Za-z0-9_])", re.IGNORECASE)


def _model_key(path: str) -> str:
    m = SPLIT_RE.match(path)
    return m["stem"] if m else path


def resolve_files(spec: FileSpec, files: list[RemoteFile]) -> list[RemoteFile]:
    """The file(s) of one model in a repo listing: the exact `file`, or the GGUF whose name carries
    `quant` (all parts of a split model, possibly in a subfolder)."""
    ggufs = [f for f in files if f.path.endswith(".gguf") and "mmproj" not in f.path.lower()]
    if spec.file is not None:
        chosen = [f for f in ggufs if f.path == spec.file]
        if not chosen:
            raise LocalspecError(f"{spec.repo} has no file {spec.file}; GGUF files there: {_names(ggufs)}")
        m = SPLIT_RE.match(spec.file)
        if m:
            chosen = [f for f in ggufs if _model_key(f.path) == m["stem"]]
    else:
        assert spec.quant is not None
        pattern = _quant_re(spec.quant)
        chosen = [f for f in ggufs if pattern.search(f.path)]
        if not chosen:
            quants = sorted({q.upper() for f in ggufs for q in QUANT_NAME_RE.findall(Path(f.path).name)})
            raise LocalspecError(
                f"{spec.repo} has no {spec.quant} GGUF; quants there: {', '.join(quants) or 'none'}"
            )
        models = sorted({_model_key(f.path) for f in chosen})
        if len(models) > 1:
            raise LocalspecError(
                f"{spec.quant} is ambiguous in {spec.repo} ({', '.join(models)}): name a file instead"
            )
    chosen.sort(key=lambda f: f.path)
    m = SPLIT_RE.match(chosen[0].path)
    if m and len(chosen) != int(m["total"]):
        raise LocalspecError(
            f"{spec.repo}: split model {m['stem']} lists {len(chosen)} of {int(m['total'])} parts"
        )
    return chosen


def _names(files: list[RemoteFile]) -> str:
    return ", ".join(f.path for f in files[:12]) + (" ..." if len(files) > 12 else "") if files else "none"


def list_repo_files(spec: FileSpec) -> list[RemoteFile]:
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    with hub_errors(spec.repo):
        tree = HfApi().list_repo_tree(spec.repo, revision=spec.revision, recursive=True)
        return [
            RemoteFile(e.path, e.lfs.size if e.lfs else e.size, e.lfs.sha256 if e.lfs else None)
            for e in tree
            if isinstance(e, RepoFile)
        ]


def cached_repo_files(spec: FileSpec, cache_dir: Path | None) -> list[RemoteFile]:
    """What the local cache holds for a repo at a revision: the listing when offline."""
    from huggingface_hub import scan_cache_dir

    try:
        info = scan_cache_dir(cache_dir)
    except Exception:  # no cache directory yet, or unreadable
        return []
    wanted = spec.revision or "main"
    for repo in info.repos:
        if repo.repo_id != spec.repo or repo.repo_type != "model":
            continue
        for rev in repo.revisions:
            if wanted in rev.refs or rev.commit_hash == wanted:
                return [
                    RemoteFile(str(f.file_path.relative_to(rev.snapshot_path)), f.size_on_disk, None)
                    for f in rev.files
                ]
    return []


class _ProgressAdapter:
    """Stands in for the tqdm class huggingface_hub drives while downloading one file."""

    def __init__(
        self,
        progress: DownloadProgress,
        name: str,
        *,
        total: int | None = None,
        initial: int = 0,
        **_: object,
    ) -> None:
        self._progress, self._name = progress, name
        progress.file_started(name, total or 0, initial)

    def __enter__(self) -> _ProgressAdapter:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int | float | None = 1) -> None:
        self._progress.file_advanced(self._name, int(n or 0))

    def close(self) -> None:
        return None


def download(
    spec: FileSpec,
    file: RemoteFile,
    progress: DownloadProgress,
    local_dir: Path | None = None,
    cache_dir: Path | None = None,
) -> Path:
    """Download (or find in the cache) one file, resuming what an earlier pull left."""
    from huggingface_hub import hf_hub_download

    with hub_errors(spec.repo, file.path):
        if local_dir is None:
            fetch_blob(spec, file, progress, cache_dir)
        path = Path(
            hf_hub_download(
                spec.repo,
                file.path,
                revision=spec.revision,
                local_dir=local_dir,
                cache_dir=cache_dir,
                tqdm_class=functools.partial(_ProgressAdapter, progress, file.path),  # type: ignore[arg-type]
            )
        )
    progress.file_finished(file.path, file.size)
    return path


def sha256_of(path: Path, advance: Callable[[int], None] = lambda _n: None) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
            advance(len(chunk))
    return h.hexdigest()


def remove_downloaded(path: Path) -> None:
    """Delete a downloaded file: in the huggingface_hub cache the snapshot entry is a link to a blob."""
    real = path.resolve()
    if path.is_symlink():
        path.unlink(missing_ok=True)
    real.unlink(missing_ok=True)


@contextmanager
def hub_errors(repo: str, filename: str | None = None) -> Iterator[None]:
    """huggingface_hub's exceptions as one-line errors a user can act on."""
    from huggingface_hub import errors as e

    what = f"{repo}/{filename}" if filename else repo
    try:
        yield
    except e.GatedRepoError:
        raise LocalspecError(
            f"{repo} is gated: accept its license on the Hub, then set HF_TOKEN to a token of that account"
        ) from None
    except e.RepositoryNotFoundError:
        raise LocalspecError(f"repository {repo} not found (if it is private, set HF_TOKEN)") from None
    except e.RevisionNotFoundError:
        raise LocalspecError(f"revision not found in {repo}") from None
    except (e.EntryNotFoundError, e.RemoteEntryNotFoundError):
        raise LocalspecError(f"{what} not found on the Hub") from None
    except (e.LocalEntryNotFoundError, e.OfflineModeIsEnabled):
        raise LocalspecError(
            f"{what} is not in the local cache and the Hub cannot be reached (offline?)"
        ) from None
    except e.HfHubHTTPError as err:
        status = err.response.status_code if err.response is not None else None
        if status in (401, 403):
            raise LocalspecError(
                f"access to {repo} denied ({status}): set HF_TOKEN and accept the model's license on the Hub"
            ) from None
        raise LocalspecError(f"the Hub answered {status} for {what}") from None
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise LocalspecError(
                f"disk full while downloading {what}: free space and pull again (it resumes)"
            ) from None
        raise LocalspecError(f"download of {what} failed: {err}") from None
    except Exception as err:  # network errors come from httpx under several names
        if type(err).__module__.startswith(("httpx", "httpcore", "requests", "urllib3")):
            raise LocalspecError(f"network error while fetching {what}: {err}") from None
        raise
