"""KIP-268's upgrade matrix, every cell run through the rebalance runner with
the first leader at the front, the back and a seeded position of the bounce
order."""

from __future__ import annotations

import zlib

import pytest

from streams.assignor import RELEASE_METADATA_VERSION, MemberConfig
from streams.matrix import (
    LEADER_FIRST,
    LEADER_LAST,
    LEADER_RANDOM,
    cells,
    expected_bounces,
    format_matrix,
    run_cell,
    run_cell_sync,
)


def test_the_matrix_is_the_kips_table():
    table = cells()
    assert len(table) == 28  # 7 + 6 + ... + 1 cells in the KIP's table
    assert ("0.10.0", "post-2.0") in table and ("2.0", "post-2.0") in table
    assert expected_bounces("0.10.0", "0.10.1") == 2      # v1 -> v2 needs upgrade.from
    assert expected_bounces("1.1", "2.0") == 2            # v2 -> v3 needs upgrade.from
    assert expected_bounces("0.10.1", "1.1") == 1         # no metadata change
    assert expected_bounces("2.0", "post-2.0") == 1       # version probing


@pytest.mark.parametrize("position", [LEADER_FIRST, LEADER_LAST, LEADER_RANDOM])
@pytest.mark.parametrize("old,new", cells(), ids=[f"{o}->{n}" for o, n in cells()])
async def test_cell_upgrades_with_the_expected_bounces(old, new, position, autojump_clock):
    result = await run_cell(old, new, members=4, seed=zlib.crc32(f"{old}>{new}>{position}".encode()),
                            leader_position=position)
    assert result.failures == (), "no member may fail on an unknown version"
    assert result.invariant_violations == (), "every partition exactly once after each completed rebalance"
    assert result.lost_assignments == ()
    assert result.final_version == RELEASE_METADATA_VERSION[new]
    assert result.bounces_needed == expected_bounces(old, new)
    # Each bounce costs at least its own rebalance.
    assert result.rebalances >= result.bounces_planned * result.members
    if RELEASE_METADATA_VERSION[old] >= 3:
        assert result.probes >= 1 or position == LEADER_FIRST
    else:
        # Old formats cannot be probed; upgrade.from keeps the leader reading them.
        assert result.probes == 0 and result.leader_triggers == 0


@pytest.mark.parametrize("old,new", [("1.1", "2.0"), ("0.10.0", "0.10.1"), ("0.10.2", "post-2.0")])
async def test_pre_2_0_formats_fail_without_upgrade_from(old, new, autojump_clock):
    """The reason for the two-bounce plan: one plain bounce from a pre-2.0
    format meets an old leader that cannot read the new subscription."""
    result = await run_cell(old, new, members=4, seed=3, leader_position=LEADER_LAST,
                            plan=[MemberConfig(new)])
    assert any("unknown version" in failure for failure in result.failures)


def test_matrix_table_prints_every_cell():
    results = [run_cell_sync("2.0", "post-2.0", seed=1), run_cell_sync("0.10.0", "2.0", seed=1)]
    text = format_matrix(results)
    assert "post-2.0 (v4)" in text
    assert text.count(" ok") == 2 and "1b/" in text and "2b/" in text


def test_runs_are_deterministic_per_seed():
    first = run_cell_sync("2.0", "post-2.0", members=6, seed=11)
    again = run_cell_sync("2.0", "post-2.0", members=6, seed=11)
    assert first == again
