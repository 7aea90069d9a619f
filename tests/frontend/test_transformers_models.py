"""End to end: small, randomly initialised Hugging Face models through the backend.

GPT-2 (one block) and BERT (one layer, with an attention mask) are built from
config objects (nothing is downloaded), run in fp32 on CPU with a fixed seed,
and compiled with `torch.compile(..., backend="fusionstitch")`:

- inference: `last_hidden_state` matches eager;
- training: `last_hidden_state.sum().backward()` gives every parameter the
  gradient eager gives an identical copy (same state_dict);
- the pipeline really ran (`stats()["kernels_launched"] > 0`), and
  `explain(..., strategy="none")` reports as many kernels as one compiled call
  of the same strategy launches.

FUSIONSTITCH_STRICT=1 makes internal errors raise instead of silently running
the graph through torch.
"""
from __future__ import annotations

import copy
import logging

import pytest
import torch

import known_fallbacks

transformers = pytest.importorskip("transformers")
fusionstitch = pytest.importorskip("fusionstitch")

SEED = 0
BATCH, SEQ = 2, 16
RTOL, ATOL = 1e-4, 1e-5
# Larger than HF's 0.02 so attention is far from uniform and its gradients are not ~0.
INIT_RANGE = 0.2


# --------------------------------------------------------------------------- models

def _gpt2():
    cfg = transformers.GPT2Config(
        n_embd=64, n_head=4, n_layer=1, n_positions=32, vocab_size=100,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=0, eos_token_id=0, initializer_range=INIT_RANGE)
    cfg._attn_implementation = "eager"
    model = transformers.GPT2Model(cfg)
    gen = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ), generator=gen)
    return model, (ids,)


def _bert():
    cfg = transformers.BertConfig(
        hidden_size=64, num_attention_heads=4, intermediate_size=128,
        num_hidden_layers=1, vocab_size=100, max_position_embeddings=32,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        initializer_range=INIT_RANGE)
    cfg._attn_implementation = "eager"
    model = transformers.BertModel(cfg)
    gen = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ), generator=gen)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, SEQ // 2:] = 0          # the second sequence is padded: the mask matters
    return model, (ids, mask)


MODELS = {"gpt2": _gpt2, "bert": _bert}


def _randomise_norms(model: torch.nn.Module) -> None:
    """Random LayerNorm affine parameters.

    Both models end in a LayerNorm; with HF's init (weight 1, bias 0) the sum of its
    output is a constant (each normalised row sums to 0), so `loss = out.sum()` would
    give every parameter before it an exactly-zero gradient and the training check
    would compare rounding noise. A random weight makes those gradients real.
    """
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.normal_(1.0, 0.5)
                m.bias.normal_(0.0, 0.5)


def _build(name):
    """A fresh fp32 CPU model in eval mode (dropout off) and its inputs, seeded."""
    torch.manual_seed(SEED)
    model, inputs = MODELS[name]()
    _randomise_norms(model)
    return model.float().eval(), inputs


def _hidden(out) -> torch.Tensor:
    return out.last_hidden_state


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("FUSIONSTITCH_STRICT", "1")
    torch._dynamo.reset()
    fusionstitch.reset_stats()
    yield
    torch._dynamo.reset()


# --------------------------------------------------------------------------- tests

@pytest.mark.parametrize("name", list(MODELS))
def test_inference_matches_eager(name, caplog):
    model, inputs = _build(name)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="fusionstitch"):
        expected = _hidden(model(*inputs))
        compiled = torch.compile(model, backend="fusionstitch")
        got = _hidden(compiled(*inputs))
    torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)
    s = fusionstitch.stats()
    assert s["kernels_launched"] > 0, s
    known_fallbacks.check_logged(s, caplog.records, name)


@pytest.mark.parametrize("name", list(MODELS))
def test_training_grads_match_eager(name, caplog):
    caplog.set_level(logging.WARNING, logger="fusionstitch")
    eager, inputs = _build(name)
    twin = copy.deepcopy(eager)
    twin.load_state_dict(eager.state_dict())
    compiled = torch.compile(twin, backend="fusionstitch")

    ref_out = _hidden(eager(*inputs))
    ref_out.sum().backward()
    out = _hidden(compiled(*inputs))
    torch.testing.assert_close(out, ref_out, rtol=RTOL, atol=ATOL)
    forward_kernels = fusionstitch.stats()["kernels_launched"]
    assert forward_kernels > 0
    out.sum().backward()

    s = fusionstitch.stats()
    assert s["kernels_launched"] > forward_kernels, f"backward did not run through us: {s}"
    known_fallbacks.check_logged(s, caplog.records, name)

    ref_params = dict(eager.named_parameters())
    checked = 0
    for pname, p in twin.named_parameters():
        ref = ref_params[pname]
        if ref.grad is None:
            assert p.grad is None or not p.grad.any(), pname
            continue
        assert p.grad is not None, f"{pname}: no gradient through the compiled model"
        # absolute tolerance relative to the gradient's scale (sums over B*S positions)
        scale = max(1.0, ref.grad.abs().max().item())
        torch.testing.assert_close(p.grad, ref.grad, rtol=RTOL, atol=ATOL * scale,
                                   msg=lambda m, n=pname: f"grad of {n}: {m}")
        checked += 1
    assert checked > 0


@pytest.mark.parametrize("name", list(MODELS))
def test_stats_match_explain(name):
    model, inputs = _build(name)
    # the default backend: the pipeline actually ran
    with torch.no_grad():
        torch.compile(model, backend="fusionstitch")(*inputs)
    assert fusionstitch.stats()["kernels_launched"] > 0

    # one inference call with strategy "none" launches what explain(strategy="none") plans
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=fusionstitch.backend(strategy="none"))
    fusionstitch.reset_stats()
    with torch.no_grad():
        compiled(*inputs)
    launched = fusionstitch.stats()["kernels_launched"]
    assert launched > 0
    stats = fusionstitch.stats()

    with torch.no_grad():
        report = fusionstitch.explain(model, *inputs, strategy="none")
    known_fallbacks.check(stats, report, name)
    assert report.num_ops > 0, str(report)
    assert all(g.fallback_reason is None for g in report.graphs), str(report)
    assert {g.kind for g in report.graphs} == {"inference"}, str(report)
    assert report.num_kernels == launched, str(report)
    # explain leaves the process-wide counters as they were
    assert fusionstitch.stats()["kernels_launched"] == launched
