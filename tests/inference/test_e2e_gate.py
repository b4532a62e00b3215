"""Issue 5's acceptance, end to end: real encoders behind the OpenRouter emulator, over HTTP,
judged by the service's gate against the in-process MiniLM (or, under `cloud`, against the
cloud anchor), with the LanceDB store as the second lock.

1. `alpha` (MiniLM fp32) pinned passes against local MiniLM (min cosine > 0.999, printed).
2. `beta` (MiniLM int8, same model id) pinned is refused (min printed) and receives no index
   chunk: the emulator's counters show no embedding call to it beyond the probe requests.
3. `gamma` (multilingual-e5-small) is refused against local MiniLM although both are 384-d.
4. Under `cloud` with `gamma` as anchor, `delta` (the other e5 build) is refused on the
   multilingual probes. `gamma` alone gets the reduced-coverage regime, stated plainly; when the
   emulator switches it to the other build behind the same pin, the periodic re-probe against
   the golden vectors quarantines it, the audit lists the rows written since its last good
   check, and re-embedding with a cleared encoder repairs them.
5. An unpinned embedding route is refused before any request reaches the emulator.
6. Verdicts survive a restart; a changed pin or model invalidates them.

Cloud routes are named as the fleet hub names a sidecar's routes
(`sidecar:<host>:<role>:cloud:<upstream>`) where the anchor matters: the anchor is the smallest
id, so `gamma` on sidecar `a` is the anchor and `delta` on sidecar `b` its peer.
"""

from __future__ import annotations

import numpy as np
import pytest

from fathom.errors import NoProviderAvailable, NotCleared, PinRequired
from fathom.index import search as search_mod
from fathom.index.chunk import Chunk
from fathom.index.request import SearchRequest
from fathom.inference.gate import Coverage, Gate, GateClearance, Status, audit, reembed
from fathom.inference.openrouter import OpenRouterClient
from fathom.inference.provider import Kind
from fathom.policy import Policy, Reference
from fathom.roles import Role
from fathom.space import Provenance
from tests.index.retrieval_fixtures import write_project
from tests.inference.e2e_fixtures import E5, KEY, all_rows, cloud_route, make_fathom

slow = pytest.mark.slow


def pinned(upstream: str) -> dict:
    return {
        role: {"policy": "aggregate", "upstream": upstream} for role in (Role.CODE_EMBEDDING, Role.EMBEDDING)
    }


def cloud_e5() -> dict:
    """code-embedding under cloud on e5, pinned to gamma; docs stay local."""
    return {
        Role.CODE_EMBEDDING: {"policy": "cloud", "model": E5, "upstream": "gamma"},
        Role.EMBEDDING: {"policy": "local"},
    }


def sidecar_id(host: str, upstream: str) -> str:
    return f"sidecar:{host}:{Role.CODE_EMBEDDING}:cloud:{upstream}"


def embedding_calls(emulator, upstream: str) -> int:
    return emulator.control.counters()["by_upstream"].get(upstream, 0)


@pytest.fixture
async def client(emulator):
    c = OpenRouterClient(KEY, base_url=emulator.base_url)
    yield c
    await c.aclose()


@pytest.fixture
async def service(tmp_path, memo_local, memo_emulator_encoders):
    fathom = make_fathom(tmp_path / "data", memo_local)
    yield fathom
    await fathom.aclose()


# ------------------------------------------------------------------------- 1, 2, 3


@slow
async def test_alpha_pinned_passes_against_local_minilm(service, client, emulator):
    service.routing.update(pinned("alpha"))
    alpha = cloud_route(service, client, "alpha")
    await service.verify_providers("code")
    v = service.gate.verdict_for(service.space("code"), alpha)
    print(f"\nalpha (MiniLM fp32 @alpha) against local MiniLM: min cosine {v.min_cosine:.6f}")
    assert v.cleared and v.key.regime is Reference.LOCAL and v.coverage is Coverage.FULL
    assert v.min_cosine > 0.999
    assert v.widths_seen == (384,) and len(v.cosines) == len(service.gate.probes)
    assert emulator.control.counters()["by_upstream"] == {"alpha": 1}  # the probes, one request


@slow
async def test_beta_pinned_is_refused_and_receives_no_index_chunk(service, client, emulator, tmp_path):
    service.routing.update(pinned("beta"))
    beta = cloud_route(service, client, "beta")
    for table in ("code", "docs"):
        await service.verify_providers(table)
    code = service.gate.verdict_for(service.space("code"), beta)
    print(
        f"\nbeta (MiniLM int8 @beta) against local MiniLM: min cosine {code.min_cosine:.4f}, "
        f"mean {np.mean(list(code.evidence.cosines.values())):.4f}; {code.reason}"
    )
    assert code.status is Status.REFUSED
    assert 0.75 < code.min_cosine < 0.97
    assert code.widths_seen == (384,) and code.finite_ok and code.count_ok
    assert not service.gate.is_cleared(service.space("docs"), beta)
    probes = embedding_calls(emulator, "beta")
    assert probes == 2  # one probe request per table

    project = write_project(tmp_path / "shop")
    report = await service.index(project, "shop")

    assert report.providers == {service.encoder.id: report.chunks}
    assert embedding_calls(emulator, "beta") == probes  # no call beyond the probes
    assert emulator.control.counters()["requests"] == {"embeddings": probes}
    for table in ("code", "docs"):
        assert {pid for pid, _ in service.store.provenance_counts("shop", table)} == {service.encoder.id}


@slow
async def test_gamma_e5_is_refused_against_local_minilm_although_both_are_384d(service, client):
    service.routing.update({Role.CODE_EMBEDDING: {"policy": "aggregate", "upstream": "gamma"}})
    gamma = cloud_route(service, client, "gamma", model=E5)
    await service.verify_providers("code")
    v = service.gate.verdict_for(service.space("code"), gamma)
    print(f"\ngamma (e5 @gamma) against local MiniLM: min cosine {v.min_cosine:.4f}")
    assert v.widths_seen == (384,) and v.finite_ok and v.count_ok  # width alone would pass it
    assert v.status is Status.REFUSED and v.min_cosine < 0.9


# ------------------------------------------------------------------------- 4


@slow
async def test_under_cloud_with_gamma_as_anchor_delta_is_refused(service, client, emulator):
    service.routing.update(cloud_e5())
    gamma = cloud_route(
        service, client, "gamma", model=E5, provider_id=sidecar_id("a", "gamma"), roles={Role.CODE_EMBEDDING}
    )
    delta = cloud_route(
        service, client, "delta", model=E5, provider_id=sidecar_id("b", "delta"), roles={Role.CODE_EMBEDDING}
    )
    space = service.space("code")
    assert (space.model, space.reference) == (E5, gamma.id)

    await service.verify_providers("code")
    anchor = service.gate.verdict_for(space, gamma)
    v = service.gate.verdict_for(space, delta)
    print(
        f"\ndelta (e5 enpt @delta) against the anchor gamma: min cosine {v.min_cosine:.4f}; "
        f"failing probes {list(v.evidence.failing)[:4]}"
    )
    assert anchor.cleared and anchor.coverage is Coverage.SELF and anchor.key.regime is Reference.CLOUD
    assert v.status is Status.REFUSED and v.key.reference.startswith(gamma.id)
    assert v.min_cosine < 0.99
    # It fails on the multilingual probes, not on English code.
    multilingual = {
        p.id
        for p in service.gate.probes.probes
        if p.language in ("chinese", "turkish", "french") or p.id.startswith("zh-")
    }
    assert set(v.evidence.failing) & multilingual
    assert not service.router.permits(Role.CODE_EMBEDDING, delta)
    assert service.router.permits(Role.CODE_EMBEDDING, gamma)
    assert emulator.control.counters()["by_upstream"] == {"gamma": 2, "delta": 1}


async def test_queries_go_to_the_tables_reference_then_a_cleared_peer_never_a_refused_one(
    service, client, emulator, tmp_path
):
    """`Fathom.encoder_for` (a project's table's space read, then `encoder_in`, the one choice
    of query encoder every search path makes): a table's own reference encoder as recorded in
    its space, then a peer the gate cleared for that space."""
    assert service.encoder_for("code") is service.encoder  # no table yet: the local reference
    service.routing.update(cloud_e5())
    gamma = cloud_route(
        service, client, "gamma", model=E5, provider_id=sidecar_id("a", "gamma"), roles={Role.CODE_EMBEDDING}
    )
    twin = cloud_route(
        service, client, "gamma", model=E5, provider_id=sidecar_id("b", "gamma"), roles={Role.CODE_EMBEDDING}
    )
    delta = cloud_route(
        service, client, "delta", model=E5, provider_id=sidecar_id("c", "delta"), roles={Role.CODE_EMBEDDING}
    )
    space = service.space("code")
    await service.verify_providers("code")
    assert service.gate.is_cleared(space, twin) and not service.gate.is_cleared(space, delta)
    await service.index(write_project(tmp_path / "shop"), "shop")
    assert service.encoder_for("code", "shop") is gamma

    def pipeline(query, project, k):
        return search_mod.pipeline(service, SearchRequest(query, project, k=k))

    for search in (service.search, pipeline):
        queries = embedding_calls(emulator, "gamma")
        hits = await search("retry a flaky call with exponential backoff", None, k=3)
        assert embedding_calls(emulator, "gamma") == queries + 1  # the query, by the anchor
        assert list(hits)[0].path == "net/retry.py"
    service.registry.eject(gamma.id, until=float("inf"), reason="down")
    assert service.encoder_for("code", "shop") is twin
    service.registry.eject(twin.id, until=float("inf"), reason="down")
    with pytest.raises(NoProviderAvailable, match="no other provider is cleared for its space"):
        service.encoder_for("code", "shop")  # delta serves the model, but the gate refused it


@slow
async def test_sole_cloud_provider_reduced_coverage_drift_quarantine_audit_and_reembed(
    service, client, emulator, tmp_path
):
    service.routing.update(cloud_e5())
    gamma = cloud_route(
        service, client, "gamma", model=E5, provider_id=sidecar_id("a", "gamma"), roles={Role.CODE_EMBEDDING}
    )
    space = service.space("code")
    assert space.reference == gamma.id

    # Alone under cloud: width + pin only, and status says so in plain words.
    await service.verify_providers("code")
    first = service.gate.verdict_for(space, gamma)
    assert first.cleared and first.coverage is Coverage.REDUCED
    lines = service.gate.status_lines(space)
    print("\n" + "\n".join(lines))
    assert any("REDUCED COVERAGE: sole cloud provider" in line and gamma.id in line for line in lines)

    root = write_project(tmp_path / "shop")
    report = await service.index(root, "shop")
    assert report.providers[gamma.id] == report.tables["code"] > 0
    first_rows = set(all_rows(service, "shop", "code"))
    # Queries of a cloud table are encoded by its anchor, over HTTP.
    queries = emulator.control.counters()["by_upstream"]["gamma"]
    hits = await service.search("retry a flaky call with exponential backoff", "shop", k=3)
    assert hits[0].path == "net/retry.py"
    assert emulator.control.counters()["by_upstream"]["gamma"] == queries + 1

    # A periodic re-probe while the stack is unchanged: a good check.
    [good] = [v for v in await service.gate.recheck_all() if v.key.provider_id == gamma.id]
    assert good.cleared and good.last_good_check > first.last_good_check

    # The upstream switches to the other e5 build behind the same pin; before the next
    # re-probe an incremental index writes the changed file's new chunk through it.
    emulator.control.drift("gamma", "enpt")
    retry = root / "net" / "retry.py"
    retry.write_text(
        retry.read_text() + '\n\ndef jitter(delay):\n    """Random extra delay."""\n'
        "    return delay * random.random()\n"
    )
    await service.index(root, "shop")
    written_after = set(all_rows(service, "shop", "code")) - first_rows
    assert written_after

    [bad] = [v for v in await service.gate.recheck_all() if v.key.provider_id == gamma.id]
    print(f"re-probe after the drift: {bad.revoked_reason}")
    assert bad.status is Status.QUARANTINED and "golden" in bad.revoked_reason
    assert str(service.registry.health(gamma.id).state) == "quarantined"
    # The store's second lock refuses its verdict now...
    with pytest.raises(NotCleared, match="quarantined"):
        row = Chunk(
            path="late.py",
            language="python",
            table="code",
            start_line=1,
            end_line=1,
            symbol="late",
            text="def late(): return 1",
        )
        service.store.write(
            "shop", "code", [row], np.eye(1, 384, dtype=np.float32), Provenance(gamma.id, first.verdict_id)
        )
    # ...and it no longer pulls: under cloud no one is left to embed a new change.
    (root / "extra.py").write_text("def late():\n    return 1\n")
    with pytest.raises(NoProviderAvailable):
        await service.index(root, "shop")
    (root / "extra.py").unlink()
    # Nor does it encode queries for the table, and no other provider is cleared to.
    with pytest.raises(NoProviderAvailable):
        await service.search("retry with backoff", "shop")

    report = audit(service.gate, service.store, "shop")
    print("\n".join(report.lines()))
    [suspect] = [s for s in report.suspects if s.provider_id == gamma.id]
    assert set(suspect.chunk_ids) == written_after  # exactly the rows since its last good check
    assert suspect.paths == ("net/retry.py",)
    assert suspect.last_good_check == good.last_good_check

    # Repair: the upstream is fixed, the gate clears it again against the golden vectors, and
    # exactly the suspect rows are re-embedded under the new verdict.
    emulator.control.drift("gamma", "original")
    again = await service.gate.verify(space, gamma, Policy.CLOUD, force=True)
    assert again.cleared and again.golden_compared and again.verdict_id != first.verdict_id
    assert service.registry.available(gamma.id)
    done = await reembed(service.gate, service.store, "shop", gamma)
    assert done.rows == {"code": len(written_after)}
    after = audit(service.gate, service.store, "shop")
    assert after.suspect_count == 0
    counts = service.store.provenance_counts("shop", "code")
    assert counts[(gamma.id, again.verdict_id)] == len(written_after)
    assert sum(counts.values()) == len(all_rows(service, "shop", "code"))
    assert (await service.search("retry a flaky call with exponential backoff", "shop"))[
        0
    ].path == "net/retry.py"


# ------------------------------------------------------------------------- 5


@slow
async def test_unpinned_embedding_route_is_refused_before_any_request(service, client, emulator, tmp_path):
    service.routing.update(pinned("alpha"))  # the role is pinned; this route ignores it
    unpinned = cloud_route(service, client, None)
    with pytest.raises(PinRequired) as err:
        await service.gate.verify(service.space("code"), unpinned, Policy.AGGREGATE)
    assert err.value.role == Role.CODE_EMBEDDING and "upstream" in str(err.value)
    assert emulator.control.counters()["requests"] == {}

    report = await service.index(write_project(tmp_path / "shop"), "shop")
    assert report.providers == {service.encoder.id: report.chunks}
    assert service.gate.verdict_for(service.space("code"), unpinned) is None
    assert emulator.control.counters()["requests"] == {}  # not one request, probes included


# ------------------------------------------------------------------------- 6


@slow
async def test_verdicts_survive_a_restart_are_reprobed_and_a_changed_pin_or_model_invalidates_them(
    tmp_path, memo_local, memo_emulator_encoders, client, emulator
):
    data = tmp_path / "data"
    first = make_fathom(data, memo_local)
    first.routing.update(pinned("alpha"))
    alpha = cloud_route(first, client, "alpha")
    await first.verify_providers("code")
    space = first.space("code")
    cleared = first.gate.verdict_for(space, alpha)
    assert cleared.cleared
    await first.aclose()
    sent_alpha = embedding_calls(emulator, "alpha")

    second = make_fathom(data, memo_local)  # a restart: new gate, registry and routes
    try:
        alpha2 = cloud_route(second, client, "alpha")
        assert second.space("code") == space
        kept = second.gate.verdict_for(space, alpha2)
        assert kept is not None and kept.verdict_id == cleared.verdict_id and kept.cleared
        assert second.gate.golden_for(space) is not None
        # Cleared before the restart, so re-probed once before it counts as cleared again (the
        # stack behind the same id may have changed while the server was down).
        assert second.gate.awaiting_reprobe(alpha2)
        assert not second.router.permits(Role.CODE_EMBEDDING, alpha2)
        await second.verify_providers("code")
        assert embedding_calls(emulator, "alpha") > sent_alpha
        assert second.gate.verdict_for(space, alpha2).verdict_id == cleared.verdict_id
        assert second.router.permits(Role.CODE_EMBEDDING, alpha2)

        # The same route id re-pinned to another upstream, or serving another model, is not the
        # stack that was judged: no verdict holds for it.
        repinned = cloud_route(second, client, "beta", provider_id=alpha.id)
        await second.gate.drain()
        assert second.gate.verdict_for(space, repinned) is None
        assert not second.router.permits(Role.CODE_EMBEDDING, repinned)
        other_model = cloud_route(second, client, "alpha", model=E5, provider_id=alpha.id, register=False)
        assert second.gate.verdict_for(space, other_model) is None

        # Judged again as re-pinned (refused: beta is int8), the old verdict is superseded and
        # the store's lock no longer takes rows under it.
        await second.verify_providers("code")
        assert second.gate.verdict_for(space, repinned).status is Status.REFUSED
        with pytest.raises(NotCleared, match="superseded"):
            GateClearance(second.gate).check(space, Provenance(alpha.id, cleared.verdict_id))
    finally:
        await second.aclose()


# ------------------------------------------------------------------------- audit window (fast)


async def test_rows_a_requalified_provider_rewrites_after_its_quarantine_are_not_suspect(tmp_path):
    """The sole provider of a space drifts, is quarantined, is fixed and cleared again, and
    re-embeds its own suspect rows: the audit then lists none (its window closed at the new
    verdict), while rows it wrote before the new verdict under the revoked one still count."""
    from fathom.index.store import LanceStore
    from fathom.space import Space
    from tests.inference.gate_fixtures import FakeEncoder, rotated_all

    clock = {"t": 1_700_000_000.0}

    def now() -> float:
        return clock["t"]

    gate = Gate(tmp_path / "data", now=now)
    store = LanceStore(tmp_path / "lance", GateClearance(gate), clock=now)
    sole = FakeEncoder("cloud:sole", kind=Kind.CLOUD, upstream="up")
    space = Space(table="code", model="fake/encoder", width=sole.width, reference=sole.id)
    store.open_table("proj", "code", space)
    v1 = await gate.verify(space, sole, Policy.CLOUD)
    rows = [
        Chunk(
            path="a.py",
            language="python",
            table="code",
            start_line=i,
            end_line=i,
            symbol=f"f{i}",
            text=f"def f{i}(): return {i}",
        )
        for i in range(1, 4)
    ]

    async def write(chunks, verdict):
        vectors = await sole.embed([c.text for c in chunks])
        store.write("proj", "code", chunks, vectors, Provenance(sole.id, verdict.verdict_id))

    clock["t"] += 10
    await write(rows[:1], v1)
    clock["t"] += 10
    await gate.recheck_all()  # good check
    clock["t"] += 10
    sole.stack = rotated_all(0.9)
    await write(rows[1:], v1)  # written by the drifted stack
    clock["t"] += 10
    await gate.recheck_all()
    assert gate.verdict_by_id(v1.verdict_id).status is Status.QUARANTINED
    suspects = {c for s in audit(gate, store, "proj").suspects for c in s.chunk_ids}
    assert suspects == {c.chunk_id for c in rows[1:]}

    sole.stack = None
    clock["t"] += 10
    v2 = await gate.verify(space, sole, Policy.CLOUD, force=True)
    assert v2.cleared
    clock["t"] += 10
    done = await reembed(gate, store, "proj", sole)
    assert done.rows == {"code": 2}
    assert audit(gate, store, "proj").suspect_count == 0
    assert store.provenance_counts("proj", "code") == {
        (sole.id, v1.verdict_id): 1,
        (sole.id, v2.verdict_id): 2,
    }
