"""The job's sums of grad-norm shares: the dense way (every rank the same run of steps,
one ``map(add)`` a rank) and the step-by-step way give the same floats, in rank order."""

from __future__ import annotations

import math
import pickle
import random
import struct

from dltop.tui.core.ranks.sharesums import Packed, ShareSums


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)  # NaN, -0.0 and inf compared bit for bit


def _step_by_step(ranks: list[dict[int, float]], cap: int) -> ShareSums:
    """The sums kept the way they were before the dense way: dicts, step by step, rank by
    rank (``add_items``, whose values the join tests of test_fsdp_norm.py pin)."""
    sums = ShareSums(cap)
    for shares in ranks:
        sums.add_items(shares.items())
    assert not sums.dense_ranks
    return sums


def _through_a_worker(shares: dict[int, float]) -> Packed:
    return pickle.loads(pickle.dumps(Packed(shares)))


def _same(ranks: list[dict[int, float]], cap: int = 1_000) -> ShareSums:
    got = ShareSums(cap)
    for shares in ranks:
        got.add(_through_a_worker(shares))
    want = _step_by_step(ranks, cap)
    steps = {s for shares in ranks for s in shares} | {-1, 10**6}
    for step in steps:
        (n, total), (n0, total0) = got.get(step), want.get(step)
        assert n == n0 and _bits(total) == _bits(total0), step
    return got


def _dense(rng: random.Random, first: int, n: int) -> dict[int, float]:
    return {first + i: rng.random() * 10 ** rng.randint(-8, 8) for i in range(n)}


def test_a_packed_rank_comes_back_from_pickle_in_its_order_bit_for_bit() -> None:
    rng = random.Random(1)
    sparse = {7: 1.5, -3: -0.0, 2**62 - 1: math.inf, 0: math.nan, 5: 2.0, 6: 3.0}
    for shares in (_dense(rng, 40, 500), sparse, {}):
        back = _through_a_worker(shares)
        assert [s for s, _ in back.items()] == list(shares)
        assert [_bits(v) for _, v in back.items()] == [_bits(v) for v in shares.values()]
    # a run of steps travels as its first step and 8 bytes a share, not a dict's pickle
    assert len(pickle.dumps(Packed(_dense(rng, 0, 10_000)))) < 8 * 10_000 + 200


def test_ranks_of_the_same_steps_are_summed_densely_and_exactly() -> None:
    rng = random.Random(2)
    ranks = [_dense(rng, 100, 300) for _ in range(8)]
    got = _same(ranks)
    assert got.dense_ranks == 8 and not got.sums  # the fast way was taken


def test_any_other_rank_goes_step_by_step_with_the_same_sums() -> None:
    rng = random.Random(3)
    base = [_dense(rng, 0, 200) for _ in range(3)]
    restarted = dict(_dense(rng, 0, 150))
    restarted.update({k: rng.random() for k in range(100, 120)})  # redone steps: last wins
    cases = [
        base + [_dense(rng, 1, 200)],  # one rank a step late
        base + [_dense(rng, 0, 199)],  # one rank a step short
        base + [{k: v for k, v in _dense(rng, 0, 200).items() if k % 7}],  # holes
        base + [restarted, _dense(rng, 0, 200)],  # dense again after: still step by step
        [dict(reversed(list(_dense(rng, 0, 200).items())))] + base,  # steps backwards
    ]
    for ranks in cases:
        _same(ranks)


def test_the_cap_holds_either_way() -> None:
    rng = random.Random(4)
    over = _same([_dense(rng, 0, 60) for _ in range(3)], cap=50)  # over the cap from the first
    assert over.get(49)[0] == 3 and over.get(50) == (0, 0.0)  # the first 50 steps, no more
    _same([_dense(rng, 0, 40), _dense(rng, 20, 40), _dense(rng, 0, 40)], cap=50)
    got = _same([_dense(rng, 0, 50) for _ in range(3)], cap=50)  # at it: dense
    assert got.dense_ranks == 3


def test_a_rank_without_shares_changes_nothing() -> None:
    """An empty rank (a file with no share) is no run of steps for the next ranks to
    match: they still go the dense way."""
    rng = random.Random(5)
    ranks = [_dense(rng, 0, 100) for _ in range(3)]
    got = ShareSums(1_000)
    got.add(_through_a_worker({}))
    for shares in ranks:
        got.add(_through_a_worker(shares))
    assert got.dense_ranks == 3 and got.get(0)[0] == 3
