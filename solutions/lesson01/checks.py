"""Hidden tests for lesson 1 (单卡训练与显存账本). Points add up to 4.

Inputs are drawn per submission from ``rng`` wherever that makes sense, so a function that
returns memorised outputs fails. Expected values come from the lesson's reference solution
(``ref``) or from hand-computed cases.
"""

from grader.checks import check, close
from grader.kernel import StudentCallError

RECIPES = ["fp32", "bf16_mixed", "bf16_mixed_fp32_grad_acc"]
KEYS = ["params", "grads", "master_params", "adam_m", "adam_v", "grad_acc_fp32", "total"]


@check(points=0.5)
def params_gpt2_small(student):
    """param_count：GPT-2 small（12 层、h=768、V=50257、1024 个位置、共享输出层）为 124,439,808，不共享时多出 V·h"""
    if not close(student.call("param_count", 12, 768, 50257, 1024), 124_439_808):
        return False
    return close(student.call("param_count", 12, 768, 50257, 1024, tied_embeddings=False), 124_439_808 + 50257 * 768)


@check(points=0.5)
def params_random(student, rng, ref):
    """param_count：随机生成的模型形状（含无位置嵌入、输出层不共享的情况）"""
    for i in range(4):
        layers, hidden = rng.randint(1, 96), rng.choice([64, 256, 1024, 2048, 5120, 8192]) + 64 * rng.randint(0, 3)
        vocab = rng.randint(1000, 160_000)
        positions = 0 if i % 2 == 0 else rng.choice([512, 1024, 2048, 4096])
        tied = i < 2
        got = student.call("param_count", layers, hidden, vocab, positions, tied)
        if not close(got, ref.param_count(layers, hidden, vocab, positions, tied)):
            return False
    return True


@check(points=0.5)
def static_7b_bf16(student):
    """static_memory_bytes：7B 模型的 bf16 混合精度 Adam 各项与合计 112 GB（手算值）"""
    n = 7 * 10**9
    expected = {
        "params": 2 * n,
        "grads": 2 * n,
        "master_params": 4 * n,
        "adam_m": 4 * n,
        "adam_v": 4 * n,
        "grad_acc_fp32": 0,
        "total": 16 * n,
    }
    return close(student.call("static_memory_bytes", n, "bf16_mixed"), expected)


@check(points=0.5)
def static_all_recipes(student, rng, ref):
    """static_memory_bytes：随机参数量下三种配方的逐项字节数（fp32 与混合精度都是 16 字节，fp32 梯度累积为 20 字节）"""
    n = rng.randint(10**6, 10**11)
    for recipe in RECIPES:
        got = student.call("static_memory_bytes", n, recipe)
        if not close(got, ref.static_memory_bytes(n, recipe)):
            return False
    got = student.call("static_memory_bytes", n, "bf16_mixed_fp32_grad_acc")
    return close(got["total"], 20 * n)


@check(points=0.25)
def static_unknown_recipe(student, rng):
    """static_memory_bytes：未知的配方名抛出 ValueError（已知配方仍正常返回）"""
    if not close(student.call("static_memory_bytes", 1000, "fp32")["total"], 16000):
        return False
    for bad in rng.sample(["fp16", "bf16", "adam", "int8", "FP32", "bf16-mixed", ""], 2):
        try:
            student.call("static_memory_bytes", 1000, bad)
        except StudentCallError as exc:
            if exc.kind != "error" or exc.detail != "ValueError":
                return False
        else:
            return False
    return True


@check(points=0.25)
def static_zero_params(student):
    """static_memory_bytes：参数量为 0 时各项都是 0，键恰好是要求的七个"""
    for recipe in RECIPES:
        got = student.call("static_memory_bytes", 0, recipe)
        if not close(got, {k: 0 for k in KEYS}):
            return False
    return True


@check(points=0.5)
def activation_lesson_example(student):
    """activation_memory_bytes：课文中的例子（s=4096、b=1、h=4096、a=32、32 层）的线性项、二次项与合计"""
    expected = {"linear": 18_253_611_008, "quadratic": 85_899_345_920, "total": 104_152_956_928}
    return close(student.call("activation_memory_bytes", 4096, 1, 4096, 32, 32), expected)


@check(points=0.5)
def activation_random_and_scaling(student, rng, ref):
    """activation_memory_bytes：随机形状与参考一致；b 翻倍时全部翻倍，s 翻倍时线性项 2 倍、二次项 4 倍"""
    heads = rng.choice([8, 12, 16, 32, 40, 64])
    hidden = heads * rng.choice([64, 80, 128])
    seq, batch, layers = rng.choice([256, 512, 1000, 2048, 3000]), rng.randint(1, 16), rng.randint(1, 80)
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
    n, d = rng.randint(10**8, 10**11), rng.randint(10**9, 10**13)
    if not close(student.call("train_flops", n, d), 6.0 * n * d):
        return False
    if not close(student.call("mfu", 7e9, 80000, 8, 989e12), 3.36e15 / 7.912e15):
        return False
    args = (
        rng.randint(10**9, 10**11),
        rng.uniform(1e3, 1e6),
        rng.choice([1, 8, 64, 512]),
        rng.choice([312e12, 989e12, 2250e12]),
    )
    return close(student.call("mfu", *args), ref.mfu(*args))
