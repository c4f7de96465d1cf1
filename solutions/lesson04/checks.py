"""Hidden tests for lesson 4 (数据并行 DP 与 DDP). Points add up to 4.

Inputs are drawn per submission from ``rng`` wherever that makes sense, so a function that
returns memorised outputs fails. Expected values come from the lesson's reference solution
(``ref``) or from a hand-computed case.
"""

from grader.checks import check, close


def _grads(rng, n, lo, hi):
    return [[f"p{i}", rng.randint(lo, hi)] for i in range(n)]


@check(points=0.25)
def bucket_lesson_example(student):
    """bucket_gradients：课文中的示例（超大梯度独占一桶、恰好装满的桶）"""
    return close(
        student.call("bucket_gradients", [["a", 10], ["b", 20], ["c", 30], ["d", 100]], 50), [["d"], ["c", "b"], ["a"]]
    )


@check(points=0.25)
def bucket_empty(student):
    """bucket_gradients：没有梯度时返回空列表"""
    return close(student.call("bucket_gradients", [], 100), [])


@check(points=0.5)
def bucket_boundary(student, rng):
    """bucket_gradients：大小之和恰好等于上限时仍放在同一个桶，多出 1 字节就要开新桶"""
    cap = rng.randint(200, 900)
    first = rng.randint(1, cap - 1)
    exact = [["w0", first], ["w1", cap - first]]  # reversed: w1 then w0, fills exactly
    over = [["v0", first + 1], ["v1", cap - first]]  # one byte too many
    if not close(student.call("bucket_gradients", exact, cap), [["w1", "w0"]]):
        return False
    return close(student.call("bucket_gradients", over, cap), [["v1"], ["v0"]])


@check(points=0.5)
def bucket_oversized(student, rng, ref):
    """bucket_gradients：超过上限的梯度单独成桶，且不与前后的梯度合并"""
    cap = rng.randint(100, 400)
    grads = _grads(rng, 6, 1, cap // 4)
    grads.insert(rng.randint(1, 5), ["huge", cap + rng.randint(1, 3 * cap)])
    got = student.call("bucket_gradients", grads, cap)
    return close(got, ref.bucket_gradients(grads, cap)) and ["huge"] in got


@check(points=0.5)
def bucket_random(student, rng, ref):
    """bucket_gradients：随机生成的一组梯度，按反向顺序贪心装桶"""
    for _ in range(3):
        cap = rng.randint(50, 500)
        grads = _grads(rng, rng.randint(15, 60), 1, cap)
        if not close(student.call("bucket_gradients", grads, cap), ref.bucket_gradients(grads, cap)):
            return False
    return True


@check(points=0.25)
def step_naive(student, rng):
    """simulate_dp_step：不重叠时，耗时等于反向总时间加通信总时间"""
    layers = [rng.uniform(0.001, 0.02) for _ in range(rng.randint(3, 40))]
    comms = [rng.uniform(0.001, 0.03) for _ in range(rng.randint(1, 8))]
    return close(student.call("simulate_dp_step", layers, comms, False), sum(layers) + sum(comms), rel=1e-7)


@check(points=0.25)
def step_lesson_example(student):
    """simulate_dp_step：课文中的例子（30 层 × 10 ms，6 个桶 × 12 ms，重叠）"""
    return close(student.call("simulate_dp_step", [0.010] * 30, [0.012] * 6, True), 0.312, rel=1e-7)


@check(points=0.5)
def step_fully_hidden(student, rng):
    """simulate_dp_step：通信很快时，只有最后一个桶的通信暴露在反向之后"""
    n = rng.randint(8, 40)
    layers = [rng.uniform(0.005, 0.02) for _ in range(n)]
    b = rng.randint(2, min(8, n))
    last = rng.uniform(0.0001, 0.001)
    comms = [0.0001] * (b - 1) + [last]
    return close(student.call("simulate_dp_step", layers, comms, True), sum(layers) + last, rel=1e-7)


@check(points=0.5)
def step_more_buckets_than_layers(student, rng, ref):
    """simulate_dp_step：桶数多于层数时，多个桶在同一层结束时一起就绪并排队通信"""
    layers = [rng.uniform(0.005, 0.02) for _ in range(rng.randint(1, 4))]
    comms = [rng.uniform(0.002, 0.01) for _ in range(rng.randint(len(layers) + 2, 12))]
    return close(
        student.call("simulate_dp_step", layers, comms, True), ref.simulate_dp_step(layers, comms, True), rel=1e-7
    )


@check(points=0.25)
def step_comm_bound(student, rng, ref):
    """simulate_dp_step：通信比反向慢时，桶在通信流上排队，耗时由通信决定"""
    layers = [rng.uniform(0.002, 0.006) for _ in range(rng.randint(10, 30))]
    comms = [rng.uniform(0.02, 0.05) for _ in range(rng.randint(3, 7))]
    return close(
        student.call("simulate_dp_step", layers, comms, True), ref.simulate_dp_step(layers, comms, True), rel=1e-7
    )


@check(points=0.25)
def gbs_in_tokens(student, rng):
    """gbs_tokens：以 token 计的全局 batch = mbs × grad_acc × dp × seq"""
    if not close(student.call("gbs_tokens", 2, 4, 128, 4096), 4 * 2**20):
        return False
    mbs, acc, dp, seq = (
        rng.randint(1, 8),
        rng.randint(1, 64),
        rng.choice([8, 16, 96, 512]),
        rng.choice([1024, 2048, 8192]),
    )
    return close(student.call("gbs_tokens", mbs, acc, dp, seq), mbs * acc * dp * seq)
