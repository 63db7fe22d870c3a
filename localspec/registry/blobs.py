"""A pulled file's blob fetched so that a pull killed midway resumes in the next process (HTTP Range
into a partial file of a name of our own, in huggingface_hub's cache, under its lock)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from localspec.errors import LocalspecError
from localspec.registry.aliases import FileSpec
from localspec.registry.remote import DownloadProgress, RemoteFile

PARTIAL_SUFFIX = ".localspec-partial"
NETWORK_ATTEMPTS = 5  # connections dropped mid-file are resumed this often before a pull gives up


def fetch_blob(spec: FileSpec, file: RemoteFile, progress: DownloadProgress, cache_dir: Path | None) -> None:
    """Bring an LFS file's blob into huggingface_hub's cache ourselves, so that a pull killed midway
    (SIGKILL, power loss, a closed laptop) resumes in the next process: bytes go over HTTP Range
    into `blobs/<sha256>.localspec-partial`, a name of our own that stays put between processes,
    under huggingface_hub's lock for that blob; when complete it is renamed to `blobs/<sha256>`,
    and hf_hub_download then only links the snapshot to it. (huggingface_hub's own `*.incomplete`
    files have random names and resume only within a process; they are removed under the lock.)
    The sha256 is checked afterwards, by the caller, as for every pulled file."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import repo_folder_name
    from huggingface_hub.utils import (
        WeakFileLock,
        build_hf_headers,
        get_session,
        hf_raise_for_status,
    )

    if constants.HF_HUB_OFFLINE or file.sha256 is None:
        return  # nothing to fetch, or not content-addressed: hf_hub_download does it all
    meta = get_hf_file_metadata(hf_hub_url(spec.repo, file.path, revision=spec.revision))
    if meta.etag != file.sha256:
        return
    cache = Path(cache_dir or constants.HF_HUB_CACHE)
    folder = repo_folder_name(repo_id=spec.repo, repo_type="model")
    blob = cache / folder / "blobs" / file.sha256
    if blob.exists():
        return
    lock = cache / ".locks" / folder / f"{file.sha256}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    blob.parent.mkdir(parents=True, exist_ok=True)
    partial = blob.with_name(blob.name + PARTIAL_SUFFIX)
    with WeakFileLock(lock):
        if blob.exists():
            return
        for stale in blob.parent.glob(f"{file.sha256}*.incomplete"):
            stale.unlink(missing_ok=True)
        done = partial.stat().st_size if partial.exists() else 0
        if done > file.size:
            partial.unlink()
            done = 0
        progress.file_started(file.path, file.size, done)
        for attempt in range(NETWORK_ATTEMPTS):
            try:
                done = _append(
                    get_session(),
                    meta.location,
                    partial,
                    done,
                    build_hf_headers(),
                    lambda n: progress.file_advanced(file.path, n),
                    hf_raise_for_status,
                )
                break
            except Exception as err:  # a dropped connection: go on from what arrived
                if attempt == NETWORK_ATTEMPTS - 1 or not type(err).__module__.startswith(
                    ("httpx", "httpcore", "h11")
                ):
                    raise
                done = partial.stat().st_size if partial.exists() else 0
        if done != file.size:
            raise LocalspecError(
                f"{file.path}: the Hub sent {done} bytes of {file.size}; pull again (it resumes)"
            )
        os.replace(partial, blob)


def _append(
    session, url: str, partial: Path, done: int, headers: dict, advance: Callable[[int], None], check
) -> int:
    """Append to `partial` what the server has from byte `done` on; the size reached."""
    if done:
        headers = {**headers, "Range": f"bytes={done}-"}
    with session.stream("GET", url, headers=headers, follow_redirects=True) as response:
        if response.status_code >= 400:
            response.read()  # the error's text, for the message
            check(response)
        if done and response.status_code != 206:  # the server ignored the Range: start over
            done = 0
        with partial.open("ab" if done else "wb") as out:
            for chunk in response.iter_bytes(1 << 20):
                out.write(chunk)
                done += len(chunk)
                advance(len(chunk))
    return done
