"""What rolling back a change that spoiled training discards (perfkit.analyses.training_progress
.rollback), and the checkpoint save lines it reads (perfkit.sources.trainer_lines.checkpoint_step).

The lines are each framework's own format strings filled in, from the upstream sources named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from perfkit.analyses.training_progress import rollback
from perfkit.sources.trainer_lines import checkpoint_step

T0 = datetime(2026, 12, 11, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("line", "step"),
    [
        # Megatron-LM megatron/training/checkpointing.py: print_rank_0('  successfully saved checkpoint
        # from iteration {:7d} to {}'.format(iteration, args.save))
        ("  successfully saved checkpoint from iteration    1000 to /ckpt/llama", 1000),
        # DeepSpeed runtime/checkpoint_engine/torch_checkpoint_engine.py: log_dist(f"[Torch] Checkpoint
        # {tag} is about to be saved!", ranks=[0]) with the default tag global_step{N}
        (
            "[2023-07-24 13:21:33,261] [INFO] [logging.py:96:log_dist] [Rank 0] [Torch] Checkpoint global_step10 is about to be saved!",
            10,
        ),  # fmt: skip
        # transformers trainer.py _save_checkpoint: logger.info(f"Saving model checkpoint to {output_dir}"),
        # output_dir = run_dir / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        (
            "[INFO|trainer.py:3984] 2024-06-01 10:00:00,000 >> Saving model checkpoint to out/checkpoint-500",
            500,
        ),
        (
            "[rank0]:[2026-12-11 09:16:22,483] [INFO] [checkpoint.py:212] saved checkpoint step_25000 (async)",
            25000,
        ),
        ("successfully loaded checkpoint from /ckpt at iteration 1000", None),  # a load, not a save
        ("Saving model checkpoint to out/final", None),  # no step in it
        ("step 25000 | loss 1.93 | checkpoint next at 25500", None),
    ],
)
def test_checkpoint_lines(line: str, step: int | None) -> None:
    assert checkpoint_step(line) == step


def _steps(first: int, last: int, every_s: float = 1.0) -> list[tuple[datetime, int]]:
    return [(T0 + timedelta(seconds=(s - first) * every_s), s) for s in range(first, last + 1, 10)]


def test_the_rollback_resumes_from_the_last_checkpoint_before_the_change() -> None:
    points = _steps(24000, 26150)  # a step a second from 09:00
    saves = [(T0 + timedelta(seconds=s - 24000), s) for s in (24500, 25000, 25500, 26000)]
    change = T0 + timedelta(seconds=1100)  # at step 25,100, after the 25,000 save
    rb = rollback(points, saves, change, T0 + timedelta(seconds=2150))
    assert rb is not None and rb.from_checkpoint
    assert (rb.resume_step, rb.frontier, rb.steps) == (25000, 26150, 1150)
    assert rb.seconds == pytest.approx(1150)  # from the save to the end


def test_without_a_checkpoint_line_the_step_at_the_change_is_a_lower_bound() -> None:
    points = _steps(24000, 26150)
    change = T0 + timedelta(seconds=1100)
    rb = rollback(points, [], change, T0 + timedelta(seconds=2150))
    assert rb is not None and not rb.from_checkpoint
    assert rb.resume_step == 25100 and rb.steps == 1050 and rb.seconds == pytest.approx(1050)
    # a save after the change is no resume point; no step logged before the change: nothing to say
    late = rollback(points, [(change + timedelta(seconds=5), 25105)], change, T0 + timedelta(seconds=2150))
    assert late is not None and late.resume_step == 25100
    assert rollback(points, [], T0 - timedelta(seconds=1), T0 + timedelta(seconds=100)) is None
