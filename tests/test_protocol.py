"""The host-side barrier protocol check: initial counts equal the arrivals issued."""

import itertools

import pytest

from wsgemm import ConfigError, GemmConfig
from wsgemm import config as cfg
from wsgemm.kernels.common import protocol
from wsgemm.kernels.common.stages import empty_arrivals, release_mask


def test_release_mask_covers_row_and_column():
    # 2x2 cluster, ranks m + 2n: CTA (0, 0) is fed by its row {0, 2} and column {0, 1}.
    assert release_mask(0, 0, 2, 2) == 0b0111
    assert release_mask(1, 1, 2, 2) == 0b1110
    assert release_mask(0, 0, 1, 1) == 0b1


def test_release_mask_of_a_cta_pair_covers_both_rows():
    # 2-CTA pair (rows 0 and 1) in a 2x2 cluster: both rows plus its column.
    assert release_mask(0, 1, 2, 2, pair=2) == 0b1111
    assert release_mask(0, 0, 2, 1, pair=2) == 0b11


CLUSTERS = [(1, 1), (2, 1), (1, 2), (2, 2)]


@pytest.mark.parametrize("cm, cn", CLUSTERS)
@pytest.mark.parametrize("tile_m", [64, 128])
@pytest.mark.parametrize("pingpong", [False, True], ids=["cooperative", "pingpong"])
def test_sm90_counts_match(cm, cn, tile_m, pingpong):
    config = GemmConfig(tile_m=tile_m, tile_n=128, cluster_m=cm, cluster_n=cn, pingpong=pingpong)
    spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", config)
    counts = protocol.sm90_counts(spec)
    assert counts and all(c.ok for c in counts)
    # A slot is read (and released) by the warps of the warpgroups sharing a tile:
    # with ping-pong consumers one warpgroup, whatever the tile's height.
    warps = 4 if pingpong else 4 * (tile_m // 64)
    assert {c.initialised for c in counts if c.barrier.startswith("empty")} == {warps * (cm + cn - 1)}


@pytest.mark.parametrize("cm, cn, two_cta", [(1, 1, False), (2, 1, False), (1, 2, False), (2, 2, False),
                                            (2, 1, True), (2, 2, True)])
def test_sm100_counts_match(cm, cn, two_cta):
    spec = cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n",
                         GemmConfig(cluster_m=cm, cluster_n=cn, two_cta=two_cta))
    counts = protocol.sm100_counts(spec)
    assert counts and all(c.ok for c in counts)
    pair = 2 if two_cta else 1
    assert {c.initialised for c in counts if c.barrier.startswith("acc_empty")} == {4 * pair}


@pytest.mark.parametrize("arch", ["sm90", "sm100"])
@pytest.mark.parametrize("delta", [-1, 1])
def test_an_off_by_one_count_is_caught(arch, delta):
    spec = cfg.make_spec(arch, "bf16", "bf16", "k", "k", "n", GemmConfig(cluster_m=2, cluster_n=2))
    right = next(c.initialised for c in protocol.barrier_counts(spec) if c.barrier.startswith("empty"))
    counts_fn = protocol.sm90_counts if arch == "sm90" else protocol.sm100_counts
    wrong = counts_fn(spec, init_empty=right + delta)
    with pytest.raises(ConfigError, match=r"barrier arrival counts do not match \(this would hang or race"):
        protocol.check_barrier_protocol(spec, wrong)


def test_a_wrong_accumulator_count_is_caught():
    spec = cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", GemmConfig(cluster_m=2, two_cta=True))
    with pytest.raises(ConfigError, match=r"acc_empty\[b\] of CTA \(0, 0\): initialised 4, 8 arrivals issued"):
        protocol.check_barrier_protocol(spec, protocol.sm100_counts(spec, init_acc_empty=4))


def test_formula_agrees_with_enumeration_everywhere():
    for cm, cn, pair in itertools.product((1, 2, 4), (1, 2, 4), (1, 2)):
        if cm % pair:
            continue
        for m, n in itertools.product(range(cm), range(cn)):
            me = 1 << (m + n * cm)
            issued = sum(1 for lm in range(0, cm, pair) for ln in range(cn)
                         if release_mask(lm, ln, cm, cn, pair) & me)
            assert issued == empty_arrivals(cm, cn, pair, 1)


# ----------------------------------------------------------------------------- observed in PTX
# The checks above count arrivals with the helpers the kernels call; these read the counts
# the compiled kernel actually initialises its barriers with and compare them with the
# arrivals the protocol enumerates: full[0..S), empty[0..S) of the ring, then (SM100)
# acc_full[0..A), acc_empty[0..A), 8 bytes each from one base.

def _issued(counts, prefix):
    """The one arrival count every CTA's barrier of this kind receives per phase."""
    issued = {c.issued for c in counts if c.barrier.startswith(prefix)}
    assert len(issued) == 1, (prefix, issued)
    return issued.pop()


@pytest.mark.parametrize("arch, config", [
    ("sm90", GemmConfig(tile_n=128)),
    ("sm90", GemmConfig(tile_n=128, cluster_m=2, cluster_n=2)),
    ("sm90", GemmConfig(tile_m=128, tile_n=128, cluster_m=2, pingpong=True)),
    ("sm100", GemmConfig()),
    ("sm100", GemmConfig(cluster_m=2, cluster_n=2)),
    ("sm100", GemmConfig(cluster_m=2, two_cta=True)),
    ("sm100", GemmConfig(cluster_m=2, cluster_n=2, two_cta=True, tile_n=128)),
], ids=lambda x: x if isinstance(x, str) else x.short())
def test_the_compiled_kernel_initialises_the_counts_the_protocol_issues(arch, config):
    pytest.importorskip("cutlass")
    from wsgemm.compile import compile_spec
    from wsgemm.inspection import mbarrier_init_counts

    spec = cfg.make_spec(arch, "bf16", "bf16", "k", "k", "n", config)
    counts = protocol.barrier_counts(spec)
    s = spec.config.stages
    expected = [1] * s + [_issued(counts, "empty")] * s
    if arch == "sm100":
        a = spec.config.acc_stages
        expected += [1] * a + [_issued(counts, "acc_empty")] * a
    inits = mbarrier_init_counts(compile_spec(spec, keep_artifacts=True).ptx)
    ring = next(by_offset for by_offset in inits.values() if 0 in by_offset and len(by_offset) >= 2 * s)
    observed = [ring.get(8 * i) for i in range(len(expected))]
    assert observed == expected


def test_a_commit_whose_mask_leaves_out_the_pairs_peer_is_caught(monkeypatch):
    # Planted: the MMA's slot release misses the peer CTA of its pair, whose copies also
    # filled the slot. The peer's empty barrier then gets too few arrivals: a hang.
    spec = cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", GemmConfig(cluster_m=2, two_cta=True))
    right = protocol.release_mask

    def without_peer(m, n, cm, cn, pair=1):
        return right(m, n, cm, cn, pair) & ~(1 << (m + 1 + n * cm)) if pair == 2 else right(m, n, cm, cn, pair)

    monkeypatch.setattr(protocol, "release_mask", without_peer)
    with pytest.raises(ConfigError, match=r"empty\[s\] of CTA \(1, 0\): initialised 1, 0 arrivals issued"):
        protocol.check_barrier_protocol(spec)
