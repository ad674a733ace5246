"""The active-learning benchmark: simulated annotators, strategies and the end-to-end result."""
import json
from xml.etree import ElementTree

import pytest
import torch
from django.core.management import CommandError

import bench
from annotate.models import Annotation, QueueItem, Solution
from bench import simulation, simulation_pool, simulation_report
from bench.tiny import build_tiny_backbone
from scoring.models import ModelVersion, SolutionScore
from scoring.rescoring import label_rows, scores, selection

INITIAL, BATCH, ROUNDS = 6, 5, 2


@pytest.fixture(scope="module")
def backbone_folder(tmp_path_factory):
    return build_tiny_backbone(tmp_path_factory.mktemp("tiny-backbone"))


@pytest.fixture
def backbone(backbone_folder, tmp_path):
    return simulation.load_backbone(backbone_folder, cache_dir=tmp_path / "cache", dtype=torch.float32)


@pytest.fixture
def problems():
    return simulation_pool.make_problems(pool="synthetic", data=None, n_pool=24, n_heldout=8)


def scored_pool(backbone, pool, seed=0):
    """The pool in the database, scored by a seeded untrained head, as round 0 sees it."""
    ids = simulation_pool.write_problems(pool, split="pool", source="tests")
    head = simulation.untrained_head(backbone, seed)
    version = simulation.record_version("round-0", backbone, head)
    scores.score_solutions(model_version=version, solution_ids=ids,
                            prm=simulation.CachedScorer(backbone, backbone.with_head(head)))
    return ids, version


def test_simulated_annotator_labels_equal_the_known_first_errors(db, backbone, problems, annotator):
    ids, version = scored_pool(backbone, problems[0])
    selection.rebuild_queue(model_version=version, policy=simulation.policy_for("random", size=12, seed=1))
    labeled = simulation.label_queue(annotator=annotator, limit=12)
    assert len(labeled) == 12
    rows = label_rows.gather_rows()
    assert sorted(r.solution_id for r in rows) == sorted(labeled)
    wrong = 0
    for row in rows:
        first_error = Solution.objects.get(pk=row.solution_id).meta["first_error"]
        expected = simulation_pool.known_ratings(len(row.steps), first_error)
        assert row.ratings == (tuple(expected + [None] * (len(row.steps) - len(expected))),)
        wrong += first_error is not None
    assert 0 < wrong < 12  # both kinds were labeled, so both branches were checked
    assert Annotation.objects.filter(status="submitted", annotator=annotator).count() == 12


def test_convincing_wrong_queues_wrong_answers_best_score_first_unlike_random(db, backbone, problems):
    _, version = scored_pool(backbone, problems[0])
    queued = {}
    for strategy in ("convincing_wrong", "random"):
        selection.rebuild_queue(model_version=version, policy=simulation.policy_for(strategy, size=8, seed=3))
        items = QueueItem.objects.filter(status="available").order_by("-priority").select_related("solution")
        queued[strategy] = [item.solution for item in items]
    picked = queued["convincing_wrong"]
    assert len(picked) == 8 and all(s.is_correct is False for s in picked)
    score = dict(SolutionScore.objects.filter(model_version=version).values_list("solution_id", "product"))
    best_wrong = max(
        (s for s in Solution.objects.filter(is_correct=False, meta__split="pool")), key=lambda s: score[s.pk]
    )
    assert picked[0] == best_wrong
    assert [score[s.pk] for s in picked] == sorted((score[s.pk] for s in picked), reverse=True)
    # Random picks are not the same solutions and include right answers (the pool is ~1/4 right).
    assert {s.pk for s in queued["random"]} != {s.pk for s in picked}
    assert any(s.is_correct for s in queued["random"])


@pytest.mark.embedded
def test_end_to_end_result_has_curves_ratios_and_baselines(db, backbone, problems, tmp_path):
    sim = simulation.Settings(rounds=ROUNDS, batch=BATCH, initial=INITIAL, seeds=(0, 1),
                              strategies=("random", "convincing_wrong"), epochs=5)
    result = simulation.simulate(backbone=backbone, pool=problems[0], held_out=problems[1], sim=sim)
    json.dumps(result)  # JSON-ready
    assert set(result["strategies"]) == set(result["efficiency_ratio"]) == {"random", "convincing_wrong"}
    for summary in result["strategies"].values():
        assert summary["labels"] == [INITIAL + BATCH * r for r in range(ROUNDS + 1)]
        for metric in simulation_report.METRICS:
            assert len(summary[metric]["mean"]) == len(summary[metric]["std"]) == ROUNDS + 1
            assert len(summary[metric]["per_seed"]) == 2
            assert all(v is None or 0.0 <= v <= 1.0 for v in summary[metric]["mean"]), (metric, summary[metric])
    # Random against itself is exactly as efficient, in every seed.
    assert result["efficiency_ratio"]["random"]["paired_auc"]["ratio"] == 1.0
    assert result["efficiency_ratio"]["random"]["paired_auc"]["std"] == 0.0
    # Both start from the same random pick; after it, convincing-wrong labels only wrong answers.
    random_share = result["strategies"]["random"]["wrong_share"]["per_seed"]
    cw_share = result["strategies"]["convincing_wrong"]["wrong_share"]["per_seed"]
    for seed_random, seed_cw in zip(random_share, cw_share):
        assert seed_cw[0] == seed_random[0]
        first_wrong = seed_cw[0] * INITIAL
        assert seed_cw[1:] == pytest.approx([(first_wrong + BATCH * r) / (INITIAL + BATCH * r) for r in (1, 2)])
    # A position-only model cannot tell a corrupted step from the reference's step at the same index.
    assert result["baselines"]["position_only"]["paired_auc"] == 0.5
    assert result["baselines"]["rule_based"]["paired_auc"] > 0.9  # synthetic errors are all arithmetic
    # Every run was rolled back: the pool is as unlabeled as it was.
    assert not Annotation.objects.exists() and not ModelVersion.objects.exists()
    drawn = ElementTree.parse(simulation_report.plot(result, tmp_path / "curves.svg")).getroot()
    assert drawn.tag == "{http://www.w3.org/2000/svg}svg"


def test_known_ratings_stop_at_the_first_error():
    assert simulation_pool.known_ratings(4, None) == [1, 1, 1, 1]
    assert simulation_pool.known_ratings(4, 2) == [1, 1, -1]
    assert simulation_pool.known_ratings(4, 0) == [-1]


def test_rule_baseline_checks_every_written_calculation():
    assert simulation_pool.arithmetic_ok("After getting 5 more, there are 12 + 5 = 17 apples.")
    assert not simulation_pool.arithmetic_ok("After getting 5 more, there are 12 + 5 = 18 apples.")
    assert not simulation_pool.arithmetic_ok("She earned 0.2 x 50 = $12, then 3 * 4 = 12.")
    assert simulation_pool.arithmetic_ok("No arithmetic here.")


def test_efficiency_is_labels_random_needs_over_labels_the_strategy_needs():
    labels = [10, 20, 30, 40]
    random_run = [
        {"labels": n, **dict.fromkeys(simulation_report.METRICS, v)} for n, v in zip(labels, [0.5, 0.6, 0.7, 0.8])
    ]
    fast_run = [
        {"labels": n, **dict.fromkeys(simulation_report.METRICS, v)} for n, v in zip(labels, [0.5, 0.7, 0.8, 0.8])
    ]
    ratio = simulation_report.efficiency({"random": [random_run], "fast": [fast_run]})["fast"]["paired_auc"]
    # Levels 0.6, 0.7, 0.8: random needs 20, 30, 40 labels; fast needs 15, 20, 30.
    expected = (20 / 15 * 30 / 20 * 40 / 30) ** (1 / 3)
    assert ratio["ratio"] == pytest.approx(expected)
    assert ratio["unreached"] == 0


def test_unknown_pool_is_refused_naming_the_option(db):
    with pytest.raises(CommandError, match="--pool 'nope'"):
        bench.call("simulate_active_learning", "--pool", "nope")


def test_math_corruption_changes_the_boxed_step_and_the_final_answer():
    import random

    from bench import corruption

    text = "We have $2 + 3 = 5$.\n\nSo the total is $5 \\cdot 4 = \\boxed{20}$.The answer is: 20"
    steps, answer = corruption.math_steps(text)
    assert steps == ["We have $2 + 3 = 5$.", "So the total is $5 \\cdot 4 = \\boxed{20}$."] and answer == "20"
    bad = corruption.corrupt_boxed(steps, random.Random(0), kind="off_by_one")
    assert bad.first_error == 1 and bad.steps[0] == steps[0]
    assert bad.answer in ("19", "21") and f"\\boxed{{{bad.answer}}}" in bad.steps[1]
    assert corruption.corrupt_boxed(["No boxed answer here."], random.Random(0)) is None


def test_a_level_never_reached_counts_at_the_last_label_count_as_an_upper_bound():
    labels = [10, 20, 30]
    random_run = [{"labels": n, **dict.fromkeys(simulation_report.METRICS, v)} for n, v in zip(labels, [0.5, 0.6, 0.7])]
    slow_run = [{"labels": n, **dict.fromkeys(simulation_report.METRICS, v)} for n, v in zip(labels, [0.5, 0.55, 0.6])]
    ratio = simulation_report.efficiency({"random": [random_run], "slow": [slow_run]})["slow"]["paired_auc"]
    # Level 0.6: random 20, slow 30; level 0.7: random 30, slow never (counted as 30).
    assert ratio["per_level"] == pytest.approx([20 / 30, 1.0])
    assert ratio["unreached"] == 1
