"""Token-true chunking: with the encoder's own tokenizer, no chunk exceeds the encoder's token
limit, for MiniLM (256) and a 512-token configuration, on real code, prose and hostile lines."""

from __future__ import annotations

from pathlib import Path

import pytest
import rich

from fathom.config import Settings
from fathom.index.chunking import chunk_file, fit_tokens
from fathom.index.indexer import discover
from fathom.inference.local import LocalEncoder

SAMPLES = Path(__file__).parents[1] / "chunking_samples"
HOSTILE = {
    "minified.js": "var a=" + "[" + ",".join(f"'k{i}x{i * 7}'" for i in range(3000)) + "];\n",
    "dense.py": "\n".join(f"x{i} = f({i}, [{i}], {{'{i}': ({i},)}})[{i}]" for i in range(400)) + "\n",
    "cjk.md": "# 标题\n\n" + "语义代码搜索引擎" * 400 + "\n",
    "one_word.txt": "a" * 20000 + "\n",
}


@pytest.fixture(scope="module", params=[None, 512], ids=["minilm-256", "configured-512"])
def counter(request):
    return LocalEncoder.from_settings(Settings(local_max_tokens=request.param)).token_counter()


def corpus():
    files = [(p.name, p.read_text()) for p in sorted(SAMPLES.iterdir()) if p.is_file()]
    files += [
        (p.relative_to(Path(rich.__file__).parent).as_posix(), p.read_text())
        for p in sorted(Path(rich.__file__).parent.glob("[a-m]*.py"))
    ]
    return files + sorted(HOSTILE.items())


def test_no_chunk_exceeds_the_encoders_token_limit(counter):
    assert counter.limit == (256 if "@256" in counter.key else 512)
    split_total = 0
    for path, text in corpus():
        chunks, split = fit_tokens(chunk_file(path, text), counter)
        split_total += split
        sizes = counter.count([c.text for c in chunks])
        over = [(c.start_line, n) for c, n in zip(chunks, sizes) if n > counter.limit]
        assert not over, f"{path}: chunks over {counter.limit} tokens at lines {over}"
        # Nothing is lost: every non-blank line of the file is in some chunk, whole or sliced.
        lines = text.splitlines()
        for c in chunks:
            assert 1 <= c.start_line <= c.end_line <= len(lines)
            assert c.text in "\n".join(lines[c.start_line - 1 : c.end_line])
        covered = {n for c in chunks for n in range(c.start_line, c.end_line + 1)}
        assert all(i + 1 in covered for i, line in enumerate(lines) if line.strip()), path
        sliced = "".join(c.text for c in chunks if c.start_line == c.end_line == 1)
        if path in ("minified.js", "one_word.txt"):
            assert sliced == text.rstrip("\n"), f"{path}: the slices of one long line are not the line"
    assert split_total > 0  # sizing in characters alone would have let these through


def test_an_index_run_reports_the_chunks_it_split(tmp_path):
    from fathom.service import Fathom

    project = tmp_path / "p"
    project.mkdir()
    (project / "dense.py").write_text(HOSTILE["dense.py"])
    found = discover(project, cache=None)
    encoder = LocalEncoder.from_settings(Settings())
    over = sum(n > 256 for n in encoder.token_counter().count([c.text for c in found.chunks]))
    assert over > 0  # the character-sized chunks of this file would be truncated by MiniLM

    async def run():
        fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=encoder)
        try:
            return await fathom.index(project, "p")
        finally:
            await fathom.aclose()

    import asyncio

    report = asyncio.run(run())
    assert report.split == over and report.max_tokens == 256
    assert report.chunks > len(found.chunks)
    from fathom.cli.core import print_report
    from fathom.cli.output import console

    with console.capture() as shown:
        print_report(report)
    assert f"{over} chunks cut to fit the encoder's 256 tokens" in shown.get()


def test_an_encoder_that_declares_only_its_limit_gets_chunks_within_an_estimate():
    """A sidecar's or a cloud model's limit travels in its provider info; without its tokenizer
    here, chunks are held to a conservative estimate of it."""
    from fathom.index.chunking import EstimatedTokens

    estimate = EstimatedTokens(128, key="sidecar:gpu-1:code-embedding:local")
    for path, text in corpus():
        chunks, _ = fit_tokens(chunk_file(path, text), estimate)
        assert all(len(c.text) <= 128 * EstimatedTokens.CHARS for c in chunks), path


async def test_a_sidecar_route_carries_its_token_limit_to_the_server():
    """`--serve ROLE=in-process` declares the model's own limit (MiniLM: 256), `,max_tokens=N`
    another; the register frame carries it, and the server's provider for the route holds it."""
    from fathom.fleet.agent import Sidecar
    from fathom.fleet.backends import open_backend, parse_serve
    from fathom.fleet.remote import SidecarProvider

    own = await open_backend(parse_serve("code-embedding=in-process"), shared={})
    set_ = await open_backend(parse_serve("embedding=in-process,max_tokens=128"), shared={})
    assert own.info.max_tokens == 256 and set_.info.max_tokens == 128
    sidecar = Sidecar("gpu-1", {next(iter(own.info.roles)): own, next(iter(set_.info.roles)): set_})
    routes = {r.role: r for r in sidecar.register_frame().routes}
    assert sorted(r.max_tokens for r in routes.values()) == [128, 256]
    for r in routes.values():
        provider = SidecarProvider(
            None,
            "gpu-1",
            r.role,
            "local",
            model=r.model,
            width=r.width,  # type: ignore[arg-type]
            max_tokens=r.max_tokens,
        )
        assert provider.info.max_tokens == r.max_tokens
    with pytest.raises(Exception, match="max_tokens"):
        parse_serve("embedding=in-process,max_tokens=many")
