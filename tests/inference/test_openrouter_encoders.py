"""Acceptance 1 of the OpenRouter issue, over real HTTP: the emulator's upstreams serve real,
genuinely different encoders behind one model id, and the client reads them faithfully."""

from __future__ import annotations

import numpy as np
import pytest

from fathom.devtools.emulator import E5_SMALL, MINILM
from fathom.inference.openrouter import OpenRouterClient, OpenRouterProvider, UpstreamMismatch, pin
from fathom.roles import Role

KEY = "sk-or-v1-encoders-test"

PROBES = [
    "def add(a, b):\n    return a + b",
    "class LRUCache:\n    def __init__(self, capacity: int):\n        self.capacity = capacity",
    "SELECT name, count(*) FROM users GROUP BY name HAVING count(*) > 1;",
    'fn main() { println!("hello"); }',
    "The quick brown fox jumps over the lazy dog.",
    "Retries use exponential backoff with jitter to avoid thundering herds.",
    "快速的棕色狐狸跳过了懒狗。",
    "这个函数返回两个数字的和。",
    "Merhaba dünya, bugün hava çok güzel.",
    "Bu fonksiyon iki sayının toplamını döndürür.",
    "Bonjour le monde, comment ça va ?",
    "La fonction renvoie la somme de deux nombres.",
    "const x = await fetch(url).then(r => r.json());",
    "# TODO: handle the empty list case before indexing",
    "lorem ipsum dolor sit amet " * 60,
    "import numpy as np\n" + "x = np.zeros((3, 3))\n" * 40,
]


@pytest.fixture(scope="session")
def local_minilm(minilm_path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(minilm_path, device="cpu")


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


async def test_pinned_alpha_matches_the_local_encoder_and_beta_does_not(emulator, local_minilm):
    local = local_minilm.encode(PROBES, convert_to_numpy=True)
    async with OpenRouterClient(KEY, base_url=emulator.base_url) as client:
        alpha = await client.embeddings(MINILM, PROBES, provider=pin("alpha"), expected_width=384)
        beta = await client.embeddings(
            MINILM, PROBES, provider=pin("beta", "only"), encoding_format="base64", expected_width=384
        )
    assert alpha.upstream == "alpha" and beta.upstream == "beta"
    assert _cos(alpha.vectors, local).min() > 0.9999
    beta_cos = _cos(beta.vectors, local)
    assert beta_cos.min() < 0.99, beta_cos
    assert beta_cos.min() > 0.5  # same model, other numerics: close, not foreign
    assert emulator.control.counters()["by_upstream"] == {"alpha": 1, "beta": 1}


async def test_unpinned_requests_are_spread_across_upstreams(emulator):
    async with OpenRouterClient(KEY, base_url=emulator.base_url) as client:
        served = {(await client.embeddings(MINILM, ["x"])).upstream for _ in range(12)}
        e5 = {(await client.embeddings(E5_SMALL, ["x"])).upstream for _ in range(12)}
    assert served == {"alpha", "beta"}
    assert e5 == {"gamma", "delta"}


async def test_e5_upstreams_differ_on_chinese_and_drift_switches_an_upstream(emulator):
    texts = ["这个函数返回两个数字的和。", "def add(a, b): return a + b"]
    async with OpenRouterClient(KEY, base_url=emulator.base_url) as client:
        gamma = (await client.embeddings(E5_SMALL, texts, provider=pin("gamma"), expected_width=384)).vectors
        delta = (await client.embeddings(E5_SMALL, texts, provider=pin("delta"), expected_width=384)).vectors
        assert _cos(gamma, delta)[0] < 0.95  # the enpt build diverges on Chinese
        emulator.control.drift("gamma", "enpt")
        drifted = await client.embeddings(E5_SMALL, texts, provider=pin("gamma"), expected_width=384)
    assert drifted.upstream == "gamma"  # same name, other vectors: only a probe can tell
    assert _cos(drifted.vectors, delta).min() > 0.9999


async def test_order_with_fallbacks_moves_on_when_the_first_upstream_is_down(emulator):
    emulator.control.set_down("alpha")
    async with OpenRouterClient(KEY, base_url=emulator.base_url) as client:
        res = await client.embeddings(MINILM, ["x"], provider={"order": ["alpha"], "allow_fallbacks": True})
    assert res.upstream == "beta"


async def test_provider_adapter_embeds_with_its_pin_and_refuses_another_upstream(emulator, local_minilm):
    async with OpenRouterClient(KEY, base_url=emulator.base_url) as client:
        provider = OpenRouterProvider(
            client, model=MINILM, roles=[Role.CODE_EMBEDDING], upstream="alpha", width=384
        )
        assert provider.id == f"openrouter:{MINILM}@alpha" and provider.info.is_cloud
        vecs = await provider.embed(PROBES[:3])
        assert vecs.dtype == np.float32 and vecs.shape == (3, 384)
        assert _cos(vecs, local_minilm.encode(PROBES[:3])).min() > 0.9999
        # A pin that the routing did not honour (here: fallbacks forced on while alpha is
        # down) is refused, however good the vectors look.
        emulator.control.set_down("alpha")
        original = client.embeddings

        async def with_fallbacks(model, inputs, **kw):
            kw["provider"] = {"order": ["alpha"], "allow_fallbacks": True}
            return await original(model, inputs, **kw)

        client.embeddings = with_fallbacks  # type: ignore[method-assign]
        with pytest.raises(UpstreamMismatch) as caught:
            await provider.embed(["x"])
        assert caught.value.expected == "alpha" and caught.value.got == "beta"


async def test_rerank_scores_come_from_a_real_encoder(emulator):
    docs = ["the cat sat on the mat", "def binary_search(xs, target):", "weather is sunny today"]
    async with OpenRouterClient(KEY, base_url=emulator.base_url) as client:
        ranked = await client.rerank("qwen/qwen3-reranker-8b", "python search function", docs)
        top = await client.rerank("cohere/rerank-v3.5", "python search function", docs, top_n=1)
        provider = OpenRouterProvider(client, model="qwen/qwen3-reranker-8b", roles=[Role.RERANKER])
        scores = await provider.rerank("python search function", docs)
    assert ranked[0][0] == 1 and top == ranked[:1]
    assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
    assert scores == pytest.approx([dict(ranked)[i] for i in range(3)])
