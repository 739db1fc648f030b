"""``patch_transformers`` on tiny random Hugging Face models built from configs (no downloads).

Shown for every family ``KNOWN_FAMILIES`` names: the patched logits stay within bf16 tolerance of the
unpatched model (Gemma included), no HF norm class is left, weights/devices/dtypes are kept, each
patched norm's output equals the scalar oracle of its mode bit for bit, and the norm outputs of a
sequence are bitwise the same alone and beside others in a batch.
"""

from __future__ import annotations

import sys
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

import ascend_rmsnorm  # noqa: E402
from ascend_rmsnorm import RMSNorm  # noqa: E402
from ascend_rmsnorm.integrations import transformers as hfpatch  # noqa: E402
from ascend_rmsnorm.integrations.transformers import PatchedRMSNorm, classify, patch_transformers  # noqa: E402

import oracle  # noqa: E402
from helpers import assert_same_bits, make_weight  # noqa: E402

COMMON = dict(
    vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
)  # fmt: skip
MOE = dict(num_experts_per_tok=2, moe_intermediate_size=32)
#: family -> (config overrides, the casting mode its RMSNorm must get)
FAMILIES = {
    "llama": ({}, "llama"),
    "mistral": ({}, "llama"),
    "mixtral": ({"num_local_experts": 4, "num_experts_per_tok": 2}, "llama"),
    "qwen2": ({}, "llama"),
    "qwen2_moe": ({"num_experts": 4, **MOE, "shared_expert_intermediate_size": 32}, "llama"),
    "qwen3": ({}, "llama"),
    "qwen3_moe": ({"num_experts": 4, **MOE}, "llama"),
    "gemma": ({}, "gemma"),
    "gemma2": ({}, "gemma"),
    "gemma3_text": ({}, "gemma"),
    "phi3": ({}, "llama"),
    "deepseek_v3": (
        {"n_routed_experts": 4, **MOE, "n_group": 1, "topk_group": 1, "q_lora_rank": 32, "kv_lora_rank": 16,
         "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16, "first_k_dense_replace": 1, "head_dim": 8},
        "llama",
    ),
}  # fmt: skip


def tiny_model(family: str, dtype=torch.bfloat16, seed=0):
    overrides, _ = FAMILIES[family]
    config = transformers.AutoConfig.for_model(family, **{**COMMON, **overrides})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # norm weights away from their init, so the modes and offsets show
        for m in model.modules():
            if hfpatch.is_rmsnorm_like(type(m)) and getattr(m, "weight", None) is not None:
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * 0.3 + (0 if "gemma" in family else 1))
    return model


def hf_norms(model):
    return [m for m in model.modules() if hfpatch.is_rmsnorm_like(type(m)) and not isinstance(m, PatchedRMSNorm)]


def ids(batch=3, seq=10, seed=5):
    return torch.randint(3, 128, (batch, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", FAMILIES)
def test_patching_an_instantiated_model(family):
    model = tiny_model(family)
    tokens = ids()
    with torch.no_grad():
        before = model(tokens).logits.float()
    old = {name: m for name, m in model.named_modules() if hfpatch.is_rmsnorm_like(type(m))}
    weights = {name: m.weight for name, m in old.items()}
    report = patch_transformers(model)
    assert hf_norms(model) == [], "an HF norm class is left"
    assert report.modules == len(old) and report.unclassified == {}
    assert list(report.patched.values()) == [(FAMILIES[family][1], 1.0 if FAMILIES[family][1] == "gemma" else 0.0)]
    for name, m in model.named_modules():
        if name in old:
            assert isinstance(m, PatchedRMSNorm) and m.weight is weights[name], "the same Parameter object"
            assert m.weight.dtype == torch.bfloat16 and m.eps == getattr(old[name], classify(type(old[name])).eps_attr)
    with torch.no_grad():
        after = model(tokens).logits.float()
    scale = before.abs().max()
    assert float((after - before).abs().max()) <= 0.05 * float(scale), "logits beyond bf16 tolerance"
    assert float((after.argmax(-1) == before.argmax(-1)).float().mean()) >= 0.9
    report.undo()
    assert {name: type(m) for name, m in model.named_modules() if name in old} == {n: type(m) for n, m in old.items()}


def test_the_public_patch_transformers_passes_the_model_and_its_options_through():
    """``ascend_rmsnorm.patch_transformers`` is the lazy wrapper in ``integrations`` (the README's way in),
    not the function the other tests call: it must hand over the model, casting_mode and families as given."""
    assert ascend_rmsnorm.patch_transformers is not patch_transformers
    model = tiny_model("gemma")
    report = ascend_rmsnorm.patch_transformers(model, casting_mode="llama")
    assert hf_norms(model) == [] and list(report.patched.values()) == [("llama", 1.0)]  # gemma's offset kept
    report.undo()
    with pytest.raises(TypeError, match="families= only applies without a model"):
        ascend_rmsnorm.patch_transformers(model, families=["llama"])


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma", "gemma3_text", "deepseek_v3"])
def test_each_patched_norm_is_its_modes_formula_and_batch_invariant(family):
    """Forward hooks on every norm: the outputs equal the scalar oracle of the norm's mode bit for
    bit, and the rows of one sequence are bitwise the same alone as beside two others."""
    model = tiny_model(family)
    patch_transformers(model)
    norms = {name: m for name, m in model.named_modules() if isinstance(m, PatchedRMSNorm)}
    seen: dict[str, list] = {}

    def hook(name):
        return lambda mod, args, out: seen.setdefault(name, []).append((args[0].detach(), out.detach()))

    handles = [m.register_forward_hook(hook(n)) for n, m in norms.items()]
    tokens = ids(batch=3, seq=10)
    with torch.no_grad():
        model(tokens)  # the batch
        model(tokens[1:2])  # the middle sequence alone
    for h in handles:
        h.remove()
    for name, m in norms.items():
        (x_batch, y_batch), (x_alone, y_alone) = seen[name]
        if torch.equal(x_batch[1:2], x_alone):  # the same input rows (the model's matmuls agree)...
            assert_same_bits(y_batch[1:2], y_alone, f"{name}: alone vs in a batch")  # ...give the same bits
        rows = x_alone.reshape(-1, x_alone.shape[-1])[:2]
        want = oracle.forward(
            rows.float().tolist(), m.weight.double().tolist(), m.eps, x_dtype="bfloat16", w_dtype="bfloat16",
            casting_mode=m.casting_mode, offset=m.offset,
        )  # fmt: skip
        got = y_alone.reshape(-1, y_alone.shape[-1])[:2].contiguous().view(torch.int16).to(torch.int64) & 0xFFFF
        assert got.tolist() == want["y"], f"{name} ({m.casting_mode}) is not its mode's formula"
    first = next(iter(norms))  # the first layer's norm sees the embeddings: identical inputs for sure
    assert torch.equal(seen[first][0][0][1:2], seen[first][1][0])


def test_patching_before_instantiation_and_undo():
    report = patch_transformers()
    try:
        assert "transformers.models.llama.modeling_llama.LlamaRMSNorm" in report.patched
        assert report.patched["transformers.models.gemma.modeling_gemma.GemmaRMSNorm"] == ("gemma", 1.0)
        for family in ("llama", "gemma"):
            model = tiny_model(family)
            assert hf_norms(model) == []
            norm = model.model.norm
            assert isinstance(norm, PatchedRMSNorm) and type(norm).__name__.startswith("Ascend")
            # HF's own weight init still sees an "RMSNorm" class: ones for Llama, zeros for Gemma (1 + w)
            fresh = transformers.AutoModelForCausalLM.from_config(model.config)
            assert bool((fresh.model.norm.weight == (0.0 if family == "gemma" else 1.0)).all())
        # a modeling module imported after the call is patched on import (AutoModel imports lazily)
        sys.modules.pop("transformers.models.olmo2.modeling_olmo2", None)
        from transformers.models.olmo2 import modeling_olmo2

        assert issubclass(modeling_olmo2.Olmo2RMSNorm, PatchedRMSNorm)
        assert modeling_olmo2.Olmo2RMSNorm.spec.casting_mode == "fp32"  # (weight * h).to(dtype)
    finally:
        report.undo()
    from transformers.models.llama import modeling_llama

    assert not issubclass(modeling_llama.LlamaRMSNorm, PatchedRMSNorm)
    assert hf_norms(tiny_model("llama")) != []
    assert hfpatch._ModelingImportHook not in {type(f) for f in sys.meta_path}


def test_every_installed_rmsnorm_class_is_classified_or_reported():
    """Over the modeling modules of the families imported here: every RMSNorm-like class either has
    a mode or a reason; the known gated/grouped variants are reported, never patched."""
    from transformers.models.qwen3_next import modeling_qwen3_next as qn

    assert classify(qn.Qwen3NextRMSNorm).casting_mode == "gemma"
    gated = classify(qn.Qwen3NextRMSNormGated)
    assert isinstance(gated, str) and "takes more than the input (gate)" in gated  # says why, not just "none"
    from transformers.models.gemma3n import modeling_gemma3n as g3n

    assert classify(g3n.Gemma3nRMSNorm).weight == "with_scale"
    unweighted = g3n.Gemma3nRMSNorm(64, eps=1e-6, with_scale=False)
    host = torch.nn.Sequential(unweighted)
    report = patch_transformers(host)
    assert isinstance(host[0], PatchedRMSNorm) and host[0].weight is None and report.modules == 1
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    assert_same_bits(host[0](x), ascend_rmsnorm.rms_norm(x, None, 1e-6), "weightless")


def test_unknown_rmsnorm_classes_are_reported_not_skipped():
    class WeirdRMSNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(8))
            self.eps = 1e-6

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (2.0 + self.weight)

    model = torch.nn.Sequential(WeirdRMSNorm(), torch.nn.RMSNorm(8, eps=1e-5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = patch_transformers(model)
    assert isinstance(model[0], WeirdRMSNorm), "left alone"
    assert any("WeirdRMSNorm" in k for k in report.unclassified)
    assert any("WeirdRMSNorm" in str(w.message) for w in caught)
    assert isinstance(model[1], PatchedRMSNorm) and model[1].casting_mode == "fp32"  # nn.RMSNorm too
    x = torch.randn(4, 8)
    assert_same_bits(model[1](x), ascend_rmsnorm.rms_norm(x, model[1].weight, 1e-5), "nn.RMSNorm patched")


def test_patched_models_pickle_and_deepcopy():
    import copy
    import io

    model = tiny_model("qwen3")
    patch_transformers(model)
    tokens = ids(batch=1)
    with torch.no_grad():
        want = model(tokens).logits
    for clone in (copy.deepcopy(model), _pickled(model, io)):
        assert hf_norms(clone) == []
        with torch.no_grad():
            assert torch.equal(clone(tokens).logits, want)


def _pickled(model, io):
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


def test_state_dicts_load_both_ways_with_hf_norms():
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    for hf, mode in ((LlamaRMSNorm(64, eps=1e-6), "llama"), (GemmaRMSNorm(64, eps=1e-6), "gemma")):
        hf = hf.to(torch.bfloat16)
        with torch.no_grad():
            hf.weight.copy_(make_weight(64, torch.bfloat16) - (1 if mode == "gemma" else 0))
        ours = RMSNorm(64, eps=1e-6, casting_mode=mode, dtype=torch.bfloat16)
        ours.load_state_dict(hf.state_dict())
        x = torch.randn(5, 64, dtype=torch.bfloat16)
        torch.testing.assert_close(ours(x), hf(x), atol=2e-2, rtol=2e-2)
        back = type(hf)(64, eps=1e-6).to(torch.bfloat16)
        back.load_state_dict(ours.state_dict())
        assert torch.equal(back.weight, hf.weight)


def test_rl_a_row_gets_the_same_norm_bits_in_rollout_and_in_training():
    """RL: an input row of a patched norm gives the same output bits wherever it comes: rollout under
    inference_mode (generate decoding one token at a time with a KV cache, left-padded prompts in a
    batch and one alone, and the prefill of the whole sequences) and training (autograd, and the
    forward that gradient checkpointing recomputes for the backward). A decode step is a few rows
    (the host path), a prefill or a training step many (the tensor path; the autograd Function)."""
    model = tiny_model("qwen3", dtype=torch.float32)  # fp32 outputs: no final rounding hides an rstd's last bit
    patch_transformers(model)
    seen: dict[tuple, tuple[str, bytes]] = {}  # (norm, input row) -> (where, output row)
    where, crossed = [""], set()

    def hook(name):
        def record(mod, args, out):
            x, y = args[0].detach(), out.detach()
            rows = zip(x.reshape(-1, x.shape[-1]).view(torch.int32), y.reshape(-1, y.shape[-1]).view(torch.int32))
            for xr, yr in rows:
                key, got = (name, xr.numpy().tobytes()), yr.numpy().tobytes()
                first = seen.setdefault(key, (where[0], got))
                assert first[1] == got, f"{name}: one input row, other bits in {first[0]} than in {where[0]}"
                crossed.add(frozenset((first[0], where[0])))

        return record

    for name, m in model.named_modules():
        if isinstance(m, PatchedRMSNorm):
            m.register_forward_hook(hook(name))
    prompts = ids(batch=2, seq=6)
    prompts[0, :2] = 0  # left padding
    mask = (prompts != 0).long()
    with torch.inference_mode():
        where[0] = "generate, batch of 2"
        full = model.generate(input_ids=prompts, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0)
        where[0] = "generate, alone"
        model.generate(input_ids=prompts[1:], max_new_tokens=3, do_sample=False, pad_token_id=0)
        where[0] = "prefill"
        model(input_ids=full, attention_mask=torch.cat([mask, torch.ones(2, 3, dtype=torch.long)], 1))
    full = full.clone()  # not an inference tensor: autograd takes it
    model.train()
    if hasattr(model, "activation_checkpointing_enable"):  # transformers 5.25's name; the old one warns
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    where[0] = "training (checkpointed)"
    model(input_ids=full[1:], labels=full[1:]).loss.backward()
    assert all(m.weight.grad is not None for m in model.modules() if isinstance(m, PatchedRMSNorm))
    others = ("generate, alone", "prefill", "training (checkpointed)")
    compared = {frozenset(("generate, batch of 2", other)) for other in others}
    assert compared <= crossed, f"too few shared input rows to compare: {crossed}"


def _no_torch_npu_of_its_own(monkeypatch):
    """A stand-in torch_npu whose own norms must never run: under the mode this package serves them."""
    import types

    from ascend_rmsnorm.integrations import batch_invariant as bi

    module = types.ModuleType("torch_npu")
    for name in bi.NPU_FUNCTIONS:
        setattr(module, name, lambda *a, _n=name, **k: pytest.fail(f"torch_npu's own {_n} ran"))
    monkeypatch.setitem(sys.modules, "torch_npu", module)
    return module


def test_a_trainer_patched_with_fp32_matches_a_rollout_through_the_modes_npu_rms_norm(monkeypatch):
    """RL with an HF trainer and a vLLM-Ascend rollout: the rollout calls torch_npu.npu_rms_norm under
    batch_invariant_mode ("fp32"); the trainer, patched with casting_mode="fp32", gives the same bits
    for every norm of a tiny Qwen3 (q_norm/k_norm included). Patched with its own formula ("llama")
    it does not, which is why the recipe forces the mode."""
    tokens = ids(batch=2, seq=6)

    def norm_calls(casting_mode):
        model = tiny_model("qwen3")
        report = patch_transformers(model, casting_mode=casting_mode)
        seen = []
        hooks = [
            m.register_forward_hook(lambda mod, args, out: seen.append((mod, args[0].detach(), out.detach())))
            for m in model.modules()
            if isinstance(m, PatchedRMSNorm)
        ]
        with torch.no_grad():
            model(tokens)
        for h in hooks:
            h.remove()
        return report, seen

    report, trainer = norm_calls("fp32")
    _, own = norm_calls(None)
    assert set(report.patched.values()) == {("fp32", 0.0)} and len(trainer) > 4
    npu = _no_torch_npu_of_its_own(monkeypatch)  # after the models: transformers looks torch_npu up
    with ascend_rmsnorm.batch_invariant_mode():
        for mod, x, y in trainer:  # the rollout's call: torch_npu.npu_rms_norm(x, weight, epsilon)
            rollout_y, _ = npu.npu_rms_norm(x, mod.weight, mod.variance_epsilon)
            assert_same_bits(y, rollout_y, f"{mod.hf_class_name}: trainer vs rollout")
        differ = [not torch.equal(y, npu.npu_rms_norm(x, mod.weight, mod.variance_epsilon)[0]) for mod, x, y in own]
    assert any(differ), "the model's own formula ('llama') should differ somewhere from the rollout's 'fp32'"


@pytest.mark.filterwarnings("ignore:.*Qwen3NextRMSNormGated left as is:RuntimeWarning")  # the qwen3 family's gated norm
def test_a_forced_mode_re_patches_what_an_earlier_call_patched():
    """A framework patched the model (each class's own formula, "llama" for Qwen3); the RL recipe's
    ``casting_mode="fp32"`` afterwards must take effect, not be skipped as "already patched", on
    instances (same Parameters, names and hooks) and on classes; a plain call after it keeps it."""
    from transformers.models.qwen3 import modeling_qwen3

    model = tiny_model("qwen3")
    patch_transformers(model)
    before = {name: m for name, m in model.named_modules() if isinstance(m, PatchedRMSNorm)}
    hook_calls = []
    model.model.norm.register_forward_hook(lambda *a: hook_calls.append(1))
    report = patch_transformers(model, casting_mode="fp32")
    assert report.modules == len(before) and set(report.patched.values()) == {("fp32", 0.0)}
    for name, m in model.named_modules():
        if name in before:
            assert m.casting_mode == "fp32" and m.weight is before[name].weight
            assert m.hf_class_name == "transformers.models.qwen3.modeling_qwen3.Qwen3RMSNorm"
    assert patch_transformers(model).modules == 0, "a plain call keeps the forced formula"
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    norm = model.model.norm
    assert_same_bits(norm(x), ascend_rmsnorm.rms_norm(x, norm.weight, norm.eps), "forced fp32")
    assert hook_calls == [1], "the hooks came along"
    report.undo()
    assert {type(m).spec.casting_mode for m in model.modules() if isinstance(m, PatchedRMSNorm)} == {"llama"}
    first = patch_transformers(families=["qwen3"])
    try:
        forced = patch_transformers(families=["qwen3"], casting_mode="fp32")
        assert modeling_qwen3.Qwen3RMSNorm.spec.casting_mode == "fp32"
        assert modeling_qwen3.Qwen3RMSNorm.hf_class.__name__ == "Qwen3RMSNorm"
        forced.undo()
        assert modeling_qwen3.Qwen3RMSNorm.spec.casting_mode == "llama"
    finally:
        first.undo()
    assert not issubclass(modeling_qwen3.Qwen3RMSNorm, PatchedRMSNorm)


def test_forcing_a_mode_keeps_each_classs_offset_and_gemma_is_refused_as_a_mode(monkeypatch):
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    host = torch.nn.Sequential(GemmaRMSNorm(64, eps=1e-6), torch.nn.RMSNorm(64, eps=1e-6)).to(torch.bfloat16)
    with torch.no_grad():
        host[0].weight.copy_(make_weight(64, torch.bfloat16) - 1)
    report = patch_transformers(host, casting_mode="llama")
    assert (host[0].casting_mode, host[0].offset) == ("llama", 1.0) and host[1].casting_mode == "llama"
    assert report.patched["transformers.models.gemma.modeling_gemma.GemmaRMSNorm"] == ("llama", 1.0)
    report.undo()
    patch_transformers(host, casting_mode="fp32")
    x = make_weight(64, torch.bfloat16, seed=3).expand(3, 64) * torch.randn(3, 64, dtype=torch.bfloat16)
    npu = _no_torch_npu_of_its_own(monkeypatch)
    with ascend_rmsnorm.batch_invariant_mode():  # Gemma forced to "fp32" is npu_gemma_rms_norm's formula
        assert_same_bits(host[0](x), npu.npu_gemma_rms_norm(x, host[0].weight, 1e-6)[0], "gemma, fp32 formula")
    with pytest.raises(ValueError, match="the offset comes from each class, so pass 'fp32'"):
        patch_transformers(host, casting_mode="gemma")


def test_candidates_are_found_by_what_forward_computes_and_every_other_norm_is_reported(recwarn):
    """T5's T5LayerNorm is an RMSNorm whatever its name: patched ("llama" when x and the weight share
    a dtype; HF's own forward, with a warning, when they do not). A LayerNorm-like class that centres
    the row is reported, never patched; the signature shows every parameter."""
    import inspect

    from transformers.models.cohere.modeling_cohere import CohereLayerNorm
    from transformers.models.t5.modeling_t5 import T5LayerNorm

    assert "families" in inspect.signature(ascend_rmsnorm.patch_transformers).parameters
    assert "casting_mode" in inspect.signature(ascend_rmsnorm.patch_transformers).parameters
    t5 = T5LayerNorm(64, eps=1e-6).to(torch.bfloat16)
    with torch.no_grad():
        t5.weight.copy_(make_weight(64, torch.bfloat16))
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    hf_y = t5(x)
    host = torch.nn.Sequential(t5, CohereLayerNorm(64))
    report = patch_transformers(host)
    assert isinstance(host[0], PatchedRMSNorm) and host[0].casting_mode == "llama"
    assert isinstance(host[1], CohereLayerNorm) and "centres the row" in report.unclassified[
        "transformers.models.cohere.modeling_cohere.CohereLayerNorm"]  # fmt: skip
    assert any("CohereLayerNorm left as is" in str(w.message) for w in recwarn)
    y = host[0](x)
    want = oracle.forward(x.float().tolist(), t5.weight.double().tolist(), 1e-6, x_dtype="bfloat16",
                          w_dtype="bfloat16", casting_mode="llama", offset=0.0)  # fmt: skip
    assert (y.view(torch.int16).to(torch.int64) & 0xFFFF).tolist() == want["y"]
    torch.testing.assert_close(y, hf_y, atol=2e-2, rtol=2e-2)
    mixed = host[0].float()  # an fp32 weight with bf16 x: T5 casts to the weight's dtype: HF's forward
    hf32 = T5LayerNorm(64, eps=1e-6)
    with torch.no_grad():
        hf32.weight.copy_(mixed.weight)
    with pytest.warns(RuntimeWarning, match="casts to the weight's dtype"):
        got = mixed(x)
    assert_same_bits(got, hf32(x), "HF's own forward")


def test_families_as_a_bare_string_or_beside_a_model_is_refused_not_ignored():
    """families="llama" used to be iterated as the letters l, a, m, a (nothing patched, three bogus
    unclassified entries); families= beside a model was silently ignored (every norm in the model was
    patched whatever families said). Both now raise a TypeError that says what to pass."""
    with pytest.raises(TypeError, match=r"families must be a sequence of family names such as \['llama'\]"):
        patch_transformers(families="llama")
    host = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(TypeError, match="families= only applies without a model"):
        patch_transformers(host, families=["llama"])


@pytest.mark.filterwarnings("ignore:.*Qwen3NextRMSNormGated left as is:RuntimeWarning")  # the qwen3 family's gated norm
@pytest.mark.filterwarnings("ignore:.*CohereLayerNorm left as is:RuntimeWarning")  # imported by an earlier test
def test_reports_undone_in_any_order_put_back_what_was_there_before_both():
    """Two calls on the same classes and model, undone first-first (a try/finally per patch, or an
    early exit): in the end every class and submodule is the original again, not the first call's
    norm that the second call had replaced."""
    from transformers.models.qwen3 import modeling_qwen3

    original = modeling_qwen3.Qwen3RMSNorm
    first = patch_transformers(families=["qwen3"])
    second = patch_transformers(families=["qwen3"], casting_mode="fp32")
    first.undo()
    assert modeling_qwen3.Qwen3RMSNorm.spec.casting_mode == "fp32", "the active later call keeps its class"
    second.undo()
    assert modeling_qwen3.Qwen3RMSNorm is original
    model = tiny_model("qwen3")
    norms = {name: m for name, m in model.named_modules() if isinstance(m, original)}
    first = patch_transformers(model)
    second = patch_transformers(model, casting_mode="fp32")
    first.undo()
    assert {type(m).spec.casting_mode for m in model.modules() if isinstance(m, PatchedRMSNorm)} == {"fp32"}
    second.undo()
    assert {name: m for name, m in model.named_modules() if isinstance(m, (original, PatchedRMSNorm))} == norms


def test_hooks_registered_before_patching_stay_removable_and_full_backward_hooks_fire():
    """The patched norm shares the original's hook dicts: a handle taken before patching still removes
    its hook, and a full backward hook (which needs the module's _is_full_backward_hook flag) still fires."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm, calls = LlamaRMSNorm(8), []
    removed = norm.register_forward_hook(lambda *a: calls.append("removed"))
    norm.register_full_backward_hook(lambda *a: calls.append("backward"))
    host = torch.nn.Sequential(norm)
    patch_transformers(host)
    removed.remove()
    x = torch.randn(2, 8, requires_grad=True)
    host(x).sum().backward()
    assert calls == ["backward"]


def test_a_norm_shared_by_several_names_becomes_one_patched_norm():
    """One HF norm registered under two names (in one parent, and in another parent) is replaced by one
    PatchedRMSNorm everywhere, as tying means; undo puts the original back everywhere."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(8)
    a, b = torch.nn.Module(), torch.nn.Module()
    a.first, a.second, b.third = norm, norm, norm
    host = torch.nn.Sequential(a, b)
    report = patch_transformers(host)
    assert isinstance(a.first, PatchedRMSNorm) and a.second is a.first and b.third is a.first
    assert report.modules == 1
    report.undo()
    assert a.first is norm and a.second is norm and b.third is norm


def test_a_norm_whose_weight_is_not_a_parameter_is_reported_not_frozen(recwarn):
    """A parametrized weight (torch.nn.utils.parametrize) is a computed tensor: adopting it would drop
    the parametrization's Parameter (no gradient, other state dict keys). Reported and left alone."""
    from torch.nn.utils import parametrize
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    class Double(torch.nn.Module):
        def forward(self, w):
            return w * 2

    norm = LlamaRMSNorm(8)
    parametrize.register_parametrization(norm, "weight", Double())
    host = torch.nn.Sequential(norm)
    report = patch_transformers(host)
    assert host[0] is norm and report.modules == 0
    assert any("not a Parameter" in why for why in report.unclassified.values())


def test_a_norm_whose_weight_is_not_one_row_is_reported_not_patched(recwarn):
    """A norm whose weight was replaced by a 2-D one (per-head scales, say): the patched norm scales the
    last dim by a 1-D weight, so it would compute something else. Reported and left alone."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(8)
    norm.weight = torch.nn.Parameter(torch.ones(2, 8))
    host = torch.nn.Sequential(norm)
    report = patch_transformers(host)
    assert host[0] is norm and report.modules == 0
    assert report.unclassified[hfpatch._qualname(LlamaRMSNorm)] == "its weight has shape (2, 8)"


def test_an_unknown_family_is_reported_and_a_model_that_is_no_module_refused(recwarn):
    report = patch_transformers(families=["no_such_family"])  # other modeling modules imported: warned of
    try:
        assert report.unclassified["transformers.models.no_such_family"].startswith("not importable: ")
    finally:
        report.undo()
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got dict"):
        patch_transformers({"model": None})


def test_a_norm_holding_state_besides_its_weight_is_reported_not_stripped(recwarn):
    """A norm some code gave another parameter, a buffer or a submodule: the patched norm holds only the
    weight, so the others would vanish from the state dict and the optimizer. Reported and left alone."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(8)
    norm.register_buffer("step", torch.zeros(()))
    norm.bias = torch.nn.Parameter(torch.zeros(8))
    host = torch.nn.Sequential(norm)
    report = patch_transformers(host)
    assert host[0] is norm and report.modules == 0
    assert (
        "holds state the patched norm would drop (bias, step)" in report.unclassified[hfpatch._qualname(LlamaRMSNorm)]
    )
    assert any("LlamaRMSNorm left as is: it holds state" in str(w.message) for w in recwarn)


def test_a_weight_the_forward_never_reads_is_state_too(recwarn):
    """A weightless formula (an L2 norm, Gemma-3n's ``with_scale=False``) adopts no weight; a ``weight``
    Parameter such a norm holds anyway would leave the state dict with it. Reported and left alone."""
    from transformers.models.gemma3n.modeling_gemma3n import Gemma3nRMSNorm

    norm = Gemma3nRMSNorm(8, with_scale=False)
    norm.weight = torch.nn.Parameter(torch.ones(8))
    host = torch.nn.Sequential(norm)
    report = patch_transformers(host)
    assert host[0] is norm and report.modules == 0
    assert "holds state the patched norm would drop (weight)" in report.unclassified[hfpatch._qualname(Gemma3nRMSNorm)]
    assert patch_transformers(torch.nn.Sequential(Gemma3nRMSNorm(8, with_scale=False))).modules == 1  # no weight
    assert any("Gemma3nRMSNorm left as is: it holds state" in str(w.message) for w in recwarn)


def test_a_norm_whose_forward_is_replaced_on_the_instance_is_reported_not_unhooked(recwarn):
    """accelerate's device hooks (``device_map``, offload) replace a module's ``forward`` on the instance
    (and keep the old one): a patched norm, with the class's forward, would drop them, and an offloaded
    weight would never be brought to the device. Reported and left alone: patch before dispatching."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(8)
    calls = []
    norm._old_forward = norm.forward
    norm.forward = lambda x: calls.append(x.shape) or norm._old_forward(x)
    host = torch.nn.Sequential(norm)
    report = patch_transformers(host)
    assert host[0] is norm and report.modules == 0
    assert "forward is replaced on the instance" in report.unclassified[hfpatch._qualname(LlamaRMSNorm)]
    host(torch.ones(2, 8))
    assert calls == [torch.Size([2, 8])]
    assert any("LlamaRMSNorm left as is: its forward is replaced" in str(w.message) for w in recwarn)


def test_a_models_own_weight_init_still_knows_its_patched_norms():
    """Qwen3-Next's ``_init_weights`` zeroes its ``1 + w`` norms' weights by ``isinstance(module,
    Qwen3NextRMSNorm)``, after HF's generic init has set every "RMSNorm"-named weight to ones. A patched
    norm failed that test and kept the ones, a scale of 2, from ``init_weights()`` after patching (a meta
    device init, a re-init). A patched norm is an instance of its HF class too."""
    from transformers.models.qwen3_next import modeling_qwen3_next as qwen3_next

    config = qwen3_next.Qwen3NextConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16,
        shared_expert_intermediate_size=16, layer_types=["full_attention"],
    )  # fmt: skip
    torch.manual_seed(0)
    model = qwen3_next.Qwen3NextForCausalLM(config)
    assert patch_transformers(model).modules == 5
    patched = [m for m in model.modules() if isinstance(m, PatchedRMSNorm)]
    assert len(patched) == 5 and all(isinstance(m, qwen3_next.Qwen3NextRMSNorm) for m in patched)
    with torch.no_grad():
        for m in patched:
            m.weight.fill_(0.5)
    model.init_weights()
    for m in patched:
        assert_same_bits(m.weight, torch.zeros_like(m.weight), f"{m.hf_class_name} re-initialised")


def test_a_patched_norm_is_not_marked_for_hub_kernels():
    """With the ``kernels`` package installed, HF's RMSNorm classes carry ``kernel_layer_name``
    (``@use_kernel_forward_from_hub("RMSNorm")``), by which ``kernels.kernelize`` (and
    ``from_pretrained(..., use_kernels=True)``) swaps a module's forward for a hub kernel's. A patched
    norm is an instance of its HF class, but it is this package's norm: the mark is hidden on the patched
    class, so kernelize passes it by (before, it raised on the forward's signature, or put a norm that is
    not batch-invariant in its place). The class is marked here as the decorator marks it, so this runs
    without ``kernels`` too; the test below runs the real ``kernelize``."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    class MarkedRMSNorm(LlamaRMSNorm):
        kernel_layer_name = "RMSNorm"

    host = torch.nn.Sequential(MarkedRMSNorm(8))
    assert patch_transformers(host).modules == 1
    patched = host[0]
    assert isinstance(patched, PatchedRMSNorm) and isinstance(patched, MarkedRMSNorm)
    assert not hasattr(patched, "kernel_layer_name") and not hasattr(type(patched), "kernel_layer_name")
    assert MarkedRMSNorm.kernel_layer_name == "RMSNorm"  # the HF class keeps its own


def test_hub_kernels_leave_a_patched_norm_alone():
    """End to end with the real ``kernels`` (transformers 5.25 requires it, so it is installed wherever
    transformers is): ``kernels.kernelize`` gives a marked HF norm the hub kernel a mapping names, and
    passes a patched norm by (before the mark was hidden it raised on the forward's signature, or put a
    norm that is not batch-invariant in its place). Without ``kernels`` the test above still runs."""
    kernels = pytest.importorskip("kernels")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    if not hasattr(LlamaRMSNorm, "kernel_layer_name"):
        pytest.skip("this transformers does not mark its RMSNorm for hub kernels")

    class Hub(torch.nn.Module):
        def forward(self, hidden_states):
            return torch.zeros_like(hidden_states)

    class Repo:  # a kernel repository the hub would hand out, made here (no downloads)
        def load(self):
            return Hub

    mapping = {"RMSNorm": {"cpu": {kernels.Mode.INFERENCE: Repo()}}}
    x = torch.randn(2, 8)
    hf_host, host = torch.nn.Sequential(LlamaRMSNorm(8)).eval(), torch.nn.Sequential(LlamaRMSNorm(8)).eval()
    patch_transformers(host)
    want = host(x)
    with kernels.use_kernel_mapping(mapping, inherit_mapping=False):
        kernels.kernelize(hf_host, mode=kernels.Mode.INFERENCE, device="cpu")
        kernels.kernelize(host, mode=kernels.Mode.INFERENCE, device="cpu")
    assert torch.equal(hf_host(x), torch.zeros_like(x))  # the mapping is live: an HF norm takes the kernel
    assert isinstance(host[0], PatchedRMSNorm) and isinstance(host[0], LlamaRMSNorm)
    assert "forward" not in vars(host[0]) and torch.equal(host(x), want)
