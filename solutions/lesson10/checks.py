"""Hidden tests for lesson 10 (专家并行 EP). Points add up to 4.

Every check draws its inputs from ``rng`` at grading time (sizes from realistic, overlapping
ranges), so a function that only reproduces the page's worked examples earns nothing. Expected
values come from the lesson's reference solution (``ref``) or from a case whose answer follows
from its construction.
"""

from grader.checks import check, close


def _logits(rng, n_tokens, n_experts, scale=2.0, typed=False):
    """Router logits, one row per token: normal floats, or (``typed``) one decimal like the page's [2.0, 1.0]."""
    if typed:
        return [[round(rng.gauss(0.0, scale), 1) for _ in range(n_experts)] for _ in range(n_tokens)]
    return [[rng.gauss(0.0, scale) for _ in range(n_experts)] for _ in range(n_tokens)]


def _tokens(rng):
    """Tokens in a batch: micro-batch × sequence length like the page's 16384, or any count."""
    if rng.random() < 0.5:
        return rng.randint(1, 5000)
    return rng.choice([1, 2, 4, 8, 16]) * rng.choice([128, 256, 512, 1024, 2048, 4096])


def _skewed_routes(rng, n_tokens, n_experts, k):
    """Top-k expert lists (distinct experts per token) with a few popular experts, like a real router."""
    weights = [rng.uniform(0.2, 1.0) for _ in range(n_experts)]
    for hot in rng.sample(range(n_experts), max(1, n_experts // 4)):
        weights[hot] *= rng.uniform(3.0, 8.0)
    routes = []
    for _ in range(n_tokens):
        pool = list(range(n_experts))
        pool_w = list(weights)
        choices = []
        for _ in range(k):
            pick = rng.choices(range(len(pool)), weights=pool_w)[0]
            choices.append(pool.pop(pick))
            pool_w.pop(pick)
        routes.append(choices)
    return routes


@check(points=0.5)
def route_random(student, rng, ref):
    """top_k_route：随机 logit 下选出的专家及其门控值"""
    for typed in (True, False):
        n_experts = rng.choice([4, 8, 16, 32, 64])
        k = rng.choice([k for k in (1, 2, 4, 8) if k <= n_experts // 2])
        logits = _logits(rng, rng.randint(3, 40), n_experts, rng.uniform(0.5, 4.0), typed)
        if not close(student.call("top_k_route", logits, k), ref.top_k_route(logits, k)):
            return False
    return close(student.call("top_k_route", [], rng.randint(1, 2)), [[], []])


@check(points=0.25)
def route_ties(student, rng, ref):
    """top_k_route：概率相等时按专家编号从小到大选择"""
    n_experts = rng.choice([4, 6, 8])
    k = rng.randint(2, n_experts - 1)
    levels = [round(rng.uniform(-1.5, 1.5), 1) for _ in range(2)]
    logits = [[rng.choice(levels) for _ in range(n_experts)] for _ in range(rng.randint(4, 20))]
    logits.append([levels[0]] * n_experts)  # every expert ties: the k smallest indices win
    return close(student.call("top_k_route", logits, k), ref.top_k_route(logits, k))


@check(points=0.5)
def capacity_formula(student, rng):
    """expert_capacity：容量按公式向上取整，没有 token 时为 0"""
    cases = [(0, rng.choice([8, 16, 64]), rng.choice([1, 2]), 1.25)]
    for i in range(4):
        n_experts = rng.choice([4, 8, 16, 32, 64, 128])
        k = rng.choice([1, 2, 4, 8])
        cf = rng.choice([0.5, 1.0, 1.25, 1.5, 2.0])
        cases.append((8 * rng.randint(1, 2048) if i == 0 else _tokens(rng), n_experts, k, cf))
    # a batch where cf*k*T/E is an exact integer, so rounding up must not add one
    n_experts = rng.choice([8, 16, 32])
    cases.append((n_experts * rng.randint(16, 512), n_experts, 2, 1.0))
    for n_tokens, n_experts, k, cf in cases:
        expected = -(-int(cf * 4) * k * n_tokens // (4 * n_experts))  # exact ceiling in integers
        if not close(student.call("expert_capacity", n_tokens, n_experts, k, cf), expected):
            return False
    return True


@check(points=0.75)
def capacity_random(student, rng, ref):
    """apply_capacity：按“先第 1 选择、后第 2 选择”的顺序装入容量，负载、保留与丢弃"""
    for _ in range(2):
        n_experts = rng.choice([4, 8, 16])
        k = rng.choice([1, 2, 2, 4])
        n_tokens = rng.randint(6, 80)
        routes = _skewed_routes(rng, n_tokens, n_experts, k)
        cap = ref.expert_capacity(n_tokens, n_experts, k, rng.choice([1.0, 1.25, 1.5]))
        if not close(
            student.call("apply_capacity", routes, n_experts, cap), ref.apply_capacity(routes, n_experts, cap)
        ):
            return False
    return True


@check(points=0.5)
def capacity_edges(student, rng):
    """apply_capacity：所有 token 选同一个专家、容量为 0、没有 token 这三种边界"""
    n_experts = rng.choice([4, 8, 16])
    hot = rng.randrange(n_experts)
    n_tokens = rng.randint(5, 40)
    cap = rng.randint(1, n_tokens - 1)
    load = [0] * n_experts
    load[hot] = cap
    expected = {"kept": [[t < cap] for t in range(n_tokens)], "load": load, "dropped": n_tokens - cap}
    if not close(student.call("apply_capacity", [[hot]] * n_tokens, n_experts, cap), expected):
        return False
    routes = _skewed_routes(rng, rng.randint(3, 20), n_experts, 2)
    zero = {"kept": [[False, False] for _ in routes], "load": [0] * n_experts, "dropped": 2 * len(routes)}
    if not close(student.call("apply_capacity", routes, n_experts, 0), zero):
        return False
    return close(
        student.call("apply_capacity", [], n_experts, cap), {"kept": [], "load": [0] * n_experts, "dropped": 0}
    )


def _placement(rng, ep, per_rank, contiguous):
    """Expert -> rank map with ``per_rank`` experts on each rank: contiguous blocks or shuffled."""
    placement = [e // per_rank for e in range(ep * per_rank)]
    if not contiguous:
        rng.shuffle(placement)
    return placement


@check(points=0.5)
def a2a_random(student, rng, ref):
    """a2a_counts：给定专家放置时的 rank 到 rank 计数矩阵和跨 rank 的分配数"""
    for contiguous in (True, False):  # the function must read the placement, not assume blocks
        ep = rng.choice([2, 4, 8])
        placement = _placement(rng, ep, rng.choice([1, 2, 4]), contiguous)
        assignments = [[rng.randrange(len(placement)) for _ in range(rng.randint(0, 60))] for _ in range(ep)]
        got = student.call("a2a_counts", assignments, placement)
        if not close(got, ref.a2a_counts(assignments, placement)):
            return False
    return close(student.call("a2a_counts", [], []), {"counts": [], "remote": 0})


@check(points=0.25)
def a2a_all_local(student, rng):
    """a2a_counts：所有分配都指向本 rank 的专家时，只有对角线非零、没有跨 rank 流量"""
    for contiguous in (True, False):
        ep = rng.choice([2, 4, 8])
        placement = _placement(rng, ep, rng.choice([1, 2, 4]), contiguous)
        local = [[e for e, r in enumerate(placement) if r == rank] for rank in range(ep)]
        sizes = [rng.randint(1, 50) for _ in range(ep)]
        assignments = [[rng.choice(local[r]) for _ in range(sizes[r])] for r in range(ep)]
        expected = [[sizes[s] if s == d else 0 for d in range(ep)] for s in range(ep)]
        if not close(student.call("a2a_counts", assignments, placement), {"counts": expected, "remote": 0}):
            return False
    return True


@check(points=0.25)
def lb_uniform(student, rng, ref):
    """load_balancing_loss：路由与概率都完全均匀时等于 alpha，同一批 token 路由不均匀时的损失值也要对"""
    n_experts = rng.choice([4, 8, 16, 32])
    k = rng.choice([1, 2])
    n_tokens = n_experts * rng.randint(1, 6)
    alpha = rng.choice([0.001, 0.005, 0.01, 0.02])
    level = round(rng.uniform(-2.0, 2.0), 1)
    logits = [[level] * n_experts for _ in range(n_tokens)]
    routes = [[(t + j) % n_experts for j in range(k)] for t in range(n_tokens)]
    if not close(student.call("load_balancing_loss", logits, routes, n_experts, alpha), alpha, rel=1e-7):
        return False
    # the same batch, with a few experts taking most of the tokens
    logits = _logits(rng, n_tokens, n_experts, 1.0, typed=True)
    routes = _skewed_routes(rng, n_tokens, n_experts, k)
    got = student.call("load_balancing_loss", logits, routes, n_experts, alpha)
    return close(got, ref.load_balancing_loss(logits, routes, n_experts, alpha), rel=1e-7)


@check(points=0.5)
def lb_random(student, rng, ref):
    """load_balancing_loss：随机路由下的损失值，以及没有 token 时为 0"""
    for typed in (True, False):
        n_experts = rng.choice([4, 8, 16])
        k = rng.choice([1, 2])
        logits = _logits(rng, rng.randint(4, 60), n_experts, rng.uniform(0.5, 3.0), typed)
        routes, _ = ref.top_k_route(logits, k)
        alpha = rng.choice([0.001, 0.01, 0.02])
        got = student.call("load_balancing_loss", logits, routes, n_experts, alpha)
        if not close(got, ref.load_balancing_loss(logits, routes, n_experts, alpha), rel=1e-7):
            return False
    return close(student.call("load_balancing_loss", [], [], rng.choice([4, 8]), 0.01), 0.0)
