"""Hidden tests for lesson 1 (单卡训练与显存账本). Points add up to 4.

Every check draws inputs from ``rng`` at grading time, shaped like the page's own examples (GPT-like
shapes, round parameter counts, sequence lengths the page uses), so that neither a function that
only knows the page's examples nor one that recognises a hidden check by its inputs earns a point.
Expected values come from the lesson's reference solution (``ref``) or from hand-computed cases.
"""

from grader.checks import check, close, raises_value_error

RECIPES = ["fp32", "bf16_mixed", "bf16_mixed_fp32_grad_acc"]
KEYS = ["params", "grads", "master_params", "adam_m", "adam_v", "grad_acc_fp32", "total"]
BF16_MIXED = {"params": 2, "grads": 2, "master_params": 4, "adam_m": 4, "adam_v": 4, "grad_acc_fp32": 0}


def _shape(rng):
    """A GPT-like model shape of the kind the page uses: hidden a multiple of 256, heads of 64 or 128 wide."""
    hidden = 256 * rng.randint(2, 48)
    vocab = rng.choice([50257, 50304, 32000, 32768, 49152, 65024, 100352, 128256, 151936])
    return rng.choice([2, 4, 6, 8, 12, 16, 24, 28, 32, 40, 48, 60, 64, 80, 96]), hidden, vocab


def _n_params(rng):
    """A parameter count as the page's examples get them: round figures (other than the page's 7B) or a counted model."""
    if rng.random() < 0.5:
        return rng.choice([1, 2, 3, 5, 6, 8, 13, 14, 20, 30, 34, 70, 175]) * 10**9 + rng.choice([0, 5 * 10**8])
    layers, hidden, vocab = _shape(rng)
    return layers * (12 * hidden * hidden + 13 * hidden) + vocab * hidden + 2 * hidden


@check(points=0.5)
def params_gpt2_small(student, rng, ref):
    """param_count：GPT-2 small（12 层、h=768、V=50257、1024 个位置、共享输出层）为 124,439,808，另一个随机模型也要对"""
    if not close(student.call("param_count", 12, 768, 50257, 1024), 124_439_808):
        return False
    layers, hidden, vocab = _shape(rng)
    positions = rng.choice([1024, 2048, 4096])
    return close(
        student.call("param_count", layers, hidden, vocab, positions), ref.param_count(layers, hidden, vocab, positions)
    )


@check(points=0.5)
def params_random(student, rng, ref):
    """param_count：随机生成的模型形状（含无位置嵌入、输出层不共享的情况）"""
    for i in range(4):
        layers, hidden, vocab = _shape(rng)
        positions = 0 if i % 2 == 0 else rng.choice([512, 1024, 2048, 4096])
        tied = i < 2
        got = student.call("param_count", layers, hidden, vocab, positions, tied_embeddings=tied)
        if not close(got, ref.param_count(layers, hidden, vocab, positions, tied)):
            return False
    return True


@check(points=0.5)
def static_7b_bf16(student, rng):
    """static_memory_bytes：bf16 混合精度 Adam 的各项为 2、2、4、4、4 字节/参数，合计 16 字节（7B 与随机参数量）"""
    for n in (7 * 10**9, _n_params(rng)):
        expected = {k: per * n for k, per in BF16_MIXED.items()}
        expected["total"] = 16 * n
        if not close(student.call("static_memory_bytes", n, "bf16_mixed"), expected):
            return False
    return True


@check(points=0.5)
def static_all_recipes(student, rng, ref):
    """static_memory_bytes：随机参数量下三种配方的逐项字节数（fp32 与混合精度都是 16 字节，fp32 梯度累积为 20 字节）"""
    n = _n_params(rng)
    for recipe in RECIPES:
        got = student.call("static_memory_bytes", n, recipe)
        if not close(got, ref.static_memory_bytes(n, recipe)):
            return False
    got = student.call("static_memory_bytes", n, "bf16_mixed_fp32_grad_acc")
    return close(got["total"], 20 * n)


@check(points=0.25)
def static_unknown_recipe(student, rng, ref):
    """static_memory_bytes：未知的配方名抛出 ValueError（已知配方仍正常返回）"""
    n, recipe = _n_params(rng), rng.choice(RECIPES)
    if not close(student.call("static_memory_bytes", n, recipe), ref.static_memory_bytes(n, recipe)):
        return False
    for bad in rng.sample(["fp16", "bf16", "adam", "int8", "FP32", "bf16-mixed", ""], 2):
        if not raises_value_error(student, "static_memory_bytes", rng.choice([10, n]), bad):
            return False
    return True


@check(points=0.25)
def static_zero_params(student, rng, ref):
    """static_memory_bytes：参数量为 0 时各项都是 0，键恰好是要求的七个；非零参数量照常计算"""
    n = _n_params(rng)
    for recipe in rng.sample(RECIPES, len(RECIPES)):
        if not close(student.call("static_memory_bytes", 0, recipe), {k: 0 for k in KEYS}):
            return False
        if not close(student.call("static_memory_bytes", n, recipe), ref.static_memory_bytes(n, recipe)):
            return False
    return True


def _act_shape(rng):
    """(hidden, heads, layers) of a GPT-like model, heads 64 or 128 wide like the page's."""
    head_dim = rng.choice([64, 128])
    heads = rng.choice([8, 12, 16, 20, 24, 32, 40, 48, 64, 96])
    return heads * head_dim, heads, rng.choice([12, 24, 32, 40, 48, 60, 80, 96])


SEQS = [512, 1024, 1536, 2048, 4096, 6144, 8192, 16384, 32768]


@check(points=0.5)
def activation_lesson_example(student, rng, ref):
    """activation_memory_bytes：课文中的例子（s=4096、b=1、h=4096、a=32、32 层）与另一个 b=1 的模型的线性项、二次项与合计"""
    expected = {"linear": 18_253_611_008, "quadratic": 85_899_345_920, "total": 104_152_956_928}
    if not close(student.call("activation_memory_bytes", 4096, 1, 4096, 32, 32), expected):
        return False
    hidden, heads, layers = _act_shape(rng)
    while (hidden, heads, layers) == (4096, 32, 32):  # the page's own model: draw another
        hidden, heads, layers = _act_shape(rng)
    seq = rng.choice(SEQS)
    return close(
        student.call("activation_memory_bytes", seq, 1, hidden, heads, layers),
        ref.activation_memory_bytes(seq, 1, hidden, heads, layers),
    )


@check(points=0.5)
def activation_random_and_scaling(student, rng, ref):
    """activation_memory_bytes：随机形状与参考一致；b 翻倍时全部翻倍，s 翻倍时线性项 2 倍、二次项 4 倍"""
    hidden, heads, layers = _act_shape(rng)
    seq, batch = rng.choice(SEQS), rng.randint(1, 16)
    base = student.call("activation_memory_bytes", seq, batch, hidden, heads, layers)
    if not close(base, ref.activation_memory_bytes(seq, batch, hidden, heads, layers)):
        return False
    twice_b = student.call("activation_memory_bytes", seq, 2 * batch, hidden, heads, layers)
    if not close(twice_b, {k: 2 * v for k, v in base.items()}):
        return False
    twice_s = student.call("activation_memory_bytes", 2 * seq, batch, hidden, heads, layers)
    return close(twice_s["linear"], 2 * base["linear"]) and close(twice_s["quadratic"], 4 * base["quadratic"])


@check(points=0.5)
def flops_and_mfu(student, rng, ref):
    """train_flops 与 mfu：6·N·D，以及课文中 8 张 H100 的例子（约 42.5%）和随机的吞吐配置"""
    n, d = _n_params(rng), rng.choice([1, 2, 3, 5, 10, 15]) * 10 ** rng.randint(10, 13)
    if not close(student.call("train_flops", n, d), 6.0 * n * d):
        return False
    if not close(student.call("mfu", 7e9, 80000, 8, 989e12), 3.36e15 / 7.912e15):
        return False
    n_gpus = rng.choice([1, 8, 16, 64, 256, 512, 1024])
    args = (
        float(_n_params(rng)),
        1000 * rng.randint(2, 400) * n_gpus // rng.choice([1, 2, 4]),
        n_gpus,
        rng.choice([312e12, 989e12, 2250e12]),
    )
    return close(student.call("mfu", *args), ref.mfu(*args))
