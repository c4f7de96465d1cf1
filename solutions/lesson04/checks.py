"""Hidden tests for lesson 4 (数据并行 DP 与 DDP). Points add up to 4.

Every check draws inputs from ``rng`` at grading time, shaped like what a student would try: the
parameters of a small model ("layers.3.mlp.up_proj.weight", fp32 bytes, a cap in MiB) or the page's
one-letter names and small sizes, identical layer times like the page's and buckets of equal size.
So neither a function that only knows the page's examples nor one that recognises a hidden check by
its inputs earns a point. Expected values come from the lesson's reference solution
(``ref``) or from a hand-computed case.
"""

from grader.checks import check, close

MIB = 2**20


def _model_grads(rng):
    """The parameters of a small GPT-like model in registration order: [name, fp32 gradient bytes]."""
    h = rng.choice([256, 384, 512, 768, 1024])
    vocab = rng.choice([8000, 16000, 32000, 50257])
    grads = [["embed_tokens.weight", 4 * vocab * h]]
    for i in range(rng.randint(2, 6)):
        grads += [
            [f"layers.{i}.input_layernorm.weight", 4 * h],
            [f"layers.{i}.self_attn.qkv_proj.weight", 4 * 3 * h * h],
            [f"layers.{i}.self_attn.o_proj.weight", 4 * h * h],
            [f"layers.{i}.post_attention_layernorm.weight", 4 * h],
            [f"layers.{i}.mlp.up_proj.weight", 4 * 4 * h * h],
            [f"layers.{i}.mlp.down_proj.weight", 4 * 4 * h * h],
        ]
    grads.append(["norm.weight", 4 * h])
    if rng.random() < 0.5:
        grads.append(["lm_head.weight", 4 * vocab * h])
    return grads


def _page_grads(rng, n, cap):
    """Gradients written the way the page's example is: one-letter names and small byte counts."""
    names = rng.sample("abcdefghijklmnopqrstuvwxyz", n)
    return [[name, rng.randint(1, cap)] for name in names]


def _grads(rng):
    """A drawn (grads, bucket_bytes): a model's parameters with a MiB-sized cap, or a page-like list."""
    if rng.random() < 0.5:
        return _model_grads(rng), rng.choice([1, 2, 4, 5, 8, 10, 16, 25, 32, 50]) * MIB
    cap = rng.choice([20, 30, 40, 50, 60, 64, 80, 100, 128, 200])
    return _page_grads(rng, rng.randint(3, 20), cap), cap


@check(points=0.25)
def bucket_lesson_example(student, rng, ref):
    """bucket_gradients：课文中的示例（超大梯度独占一桶、恰好装满的桶）和另一组梯度"""
    if not close(
        student.call("bucket_gradients", [["a", 10], ["b", 20], ["c", 30], ["d", 100]], 50), [["d"], ["c", "b"], ["a"]]
    ):
        return False
    grads, cap = _grads(rng)
    return close(student.call("bucket_gradients", grads, cap), ref.bucket_gradients(grads, cap))


@check(points=0.25)
def bucket_empty(student, rng, ref):
    """bucket_gradients：没有梯度时返回空列表，只有一个梯度时一个桶"""
    if not close(student.call("bucket_gradients", [], rng.choice([50, 25 * MIB])), []):
        return False
    grads, cap = _grads(rng)
    one = [rng.choice(grads)]
    if not close(student.call("bucket_gradients", one, cap), [[one[0][0]]]):
        return False
    return close(student.call("bucket_gradients", grads, cap), ref.bucket_gradients(grads, cap))


@check(points=0.5)
def bucket_boundary(student, rng):
    """bucket_gradients：大小之和恰好等于上限时仍放在同一个桶，多出 1 字节就要开新桶"""
    grads = [g for g in _model_grads(rng) if "layers." in g[0]]
    at = rng.randrange(len(grads) - 1)
    first, second = grads[at], grads[at + 1]  # in the backward pass, second comes first
    cap = first[1] + second[1]
    if not close(student.call("bucket_gradients", [first, second], cap), [[second[0], first[0]]]):
        return False
    return close(student.call("bucket_gradients", [first, second], cap - 1), [[second[0]], [first[0]]])


@check(points=0.5)
def bucket_oversized(student, rng, ref):
    """bucket_gradients：超过上限的梯度（如词嵌入）单独成桶，且不与前后的梯度合并"""
    grads = _model_grads(rng)
    big = grads[0]
    cap = rng.choice([c * MIB for c in (1, 2, 4, 5, 8, 10, 16, 25) if c * MIB < big[1]])
    if rng.random() < 0.5:  # move the embedding between two layers, so that it has neighbours on both sides
        grads.insert(rng.randint(2, len(grads) - 2), grads.pop(0))
    got = student.call("bucket_gradients", grads, cap)
    return close(got, ref.bucket_gradients(grads, cap)) and [big[0]] in got


@check(points=0.5)
def bucket_random(student, rng, ref):
    """bucket_gradients：随机生成的一组梯度，按反向顺序贪心装桶"""
    for _ in range(3):
        grads, cap = _grads(rng)
        if not close(student.call("bucket_gradients", grads, cap), ref.bucket_gradients(grads, cap)):
            return False
    return True


def _ms(rng, lo, hi):
    """A duration in seconds, a whole number of tenths of a millisecond in [lo, hi] ms."""
    return rng.randint(10 * lo, 10 * hi) / 10000


def _layers(rng, n, lo=2, hi=20, equal=True):
    """Backward times of n layers: identical like the page's [0.01] * 30, or each layer its own."""
    if equal:
        return [_ms(rng, lo, hi)] * n
    return [_ms(rng, lo, hi) for _ in range(n)]


def _comms(rng, b, lo, hi):
    """All-reduce times of b buckets: equal buckets and a last one that is often smaller."""
    c = _ms(rng, lo, hi)
    return [c] * (b - 1) + [rng.choice([c, _ms(rng, lo, hi)])]


@check(points=0.25)
def step_naive(student, rng):
    """simulate_dp_step：不重叠时，耗时等于反向总时间加通信总时间"""
    for equal in (True, False):
        layers = _layers(rng, rng.randint(3, 48), equal=equal)
        comms = _comms(rng, rng.randint(1, 8), 1, 30)
        if not close(student.call("simulate_dp_step", layers, comms, False), sum(layers) + sum(comms), rel=1e-7):
            return False
    return True


@check(points=0.25)
def step_lesson_example(student, rng, ref):
    """simulate_dp_step：课文中的例子（30 层 × 10 ms，6 个桶 × 12 ms，重叠）和另一组层与桶"""
    if not close(student.call("simulate_dp_step", [0.010] * 30, [0.012] * 6, True), 0.312, rel=1e-7):
        return False
    layers, comms = _layers(rng, rng.randint(8, 48)), _comms(rng, rng.randint(2, 8), 5, 30)
    return close(
        student.call("simulate_dp_step", layers, comms, True), ref.simulate_dp_step(layers, comms, True), rel=1e-7
    )


@check(points=0.5)
def step_fully_hidden(student, rng, ref):
    """simulate_dp_step：通信比反向快时，只有最后一个桶的通信暴露在反向之后"""
    for equal in (True, False):
        n = rng.randint(8, 48)
        layers = _layers(rng, n, 5, 20, equal)
        b = rng.randint(2, min(8, n))
        # each bucket's all-reduce ends before the next one is ready: the gap is at least n // b layers
        comms = _comms(rng, b, 1, max(1, int(1000 * min(layers)) * (n // b) - 1))
        got = student.call("simulate_dp_step", layers, comms, True)
        if not close(got, sum(layers) + comms[-1], rel=1e-7):
            return False
        if not close(got, ref.simulate_dp_step(layers, comms, True), rel=1e-7):
            return False
    return True


@check(points=0.5)
def step_more_buckets_than_layers(student, rng, ref):
    """simulate_dp_step：桶数多于层数时，多个桶在同一层结束时一起就绪并排队通信"""
    for equal in (True, False):
        layers = _layers(rng, rng.randint(1, 4), 5, 20, equal)
        comms = _comms(rng, rng.randint(len(layers) + 2, 12), 2, 10)
        if not close(
            student.call("simulate_dp_step", layers, comms, True), ref.simulate_dp_step(layers, comms, True), rel=1e-7
        ):
            return False
    return True


@check(points=0.25)
def step_comm_bound(student, rng, ref):
    """simulate_dp_step：通信比反向慢时，桶在通信流上排队，耗时由通信决定"""
    for equal in (True, False):
        layers = _layers(rng, rng.randint(10, 30), 2, 6, equal)
        comms = _comms(rng, rng.randint(3, 7), 20, 50)
        if not close(
            student.call("simulate_dp_step", layers, comms, True), ref.simulate_dp_step(layers, comms, True), rel=1e-7
        ):
            return False
    return True


@check(points=0.25)
def gbs_in_tokens(student, rng):
    """gbs_tokens：以 token 计的全局 batch = mbs × grad_acc × dp × seq"""
    if not close(student.call("gbs_tokens", 2, 4, 128, 4096), 4 * 2**20):
        return False
    mbs, acc, dp, seq = (
        rng.choice([1, 2, 4, 8]),
        rng.choice([1, 2, 4, 8, 16, 32, 64]),
        rng.choice([8, 16, 32, 64, 128, 256, 512, 1024]),
        rng.choice([1024, 2048, 4096, 8192]),
    )
    return close(student.call("gbs_tokens", mbs, acc, dp, seq), mbs * acc * dp * seq)
