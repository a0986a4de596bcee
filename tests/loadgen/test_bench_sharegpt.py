"""``perfkit bench --dataset-name sharegpt --dataset-path FILE`` (vLLM ``bench serve``'s options):
each conversation's first human turn is a prompt, its reply's length the output length.

The file is synthetic, written here in the ShareGPT layout vLLM's ``ShareGPTDataset`` reads
(``vllm/benchmarks/datasets.py``: a JSON list of ``{"id", "conversations": [{"from", "value"}]}``,
as in ``anon8231489123/ShareGPT_Vicuna_unfiltered``'s ``ShareGPT_V3_unfiltered_cleaned_split.json``).
"""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from perfkit.app.cli.main import cli
from perfkit.lab.serve import serving

CONVERSATIONS = [
    {
        "id": "synthetic_0",
        "conversations": [
            {"from": "human", "value": "Summarize the main ideas of queueing theory in three bullet points."},
            {
                "from": "gpt",
                "value": "1. Arrivals wait when servers are busy.\n2. Utilisation drives delay.\n3. Variance hurts.",
            },
            {"from": "human", "value": "And Little's law?"},
            {"from": "gpt", "value": "L = lambda W."},
        ],
    },
    {
        "id": "synthetic_1",
        "conversations": [
            {"from": "system", "value": "You are terse."},
            {"from": "human", "value": "Why does batching raise throughput on a GPU?"},
            {"from": "gpt", "value": "One weight read serves many tokens: decode is memory-bound."},
        ],
    },
    {"id": "synthetic_2", "conversations": [{"from": "human", "value": "A turn with no reply is skipped."}]},
    {
        "id": "synthetic_3",
        "conversations": [{"from": "gpt", "value": "No human turn: skipped."}, {"from": "gpt", "value": "x"}],
    },
    {
        "id": "synthetic_4",
        "conversations": [
            {"from": "human", "value": "What does KV cache hold?"},
            {"from": "gpt", "value": "The keys and values of every earlier token, per layer."},
        ],
    },
]
USED = [(c["conversations"][0]["value"], c["conversations"][1]["value"]) for c in CONVERSATIONS[:1]] + [
    (CONVERSATIONS[1]["conversations"][1]["value"], CONVERSATIONS[1]["conversations"][2]["value"]),
    (CONVERSATIONS[4]["conversations"][0]["value"], CONVERSATIONS[4]["conversations"][1]["value"]),
]


def _bench(*args: str):
    res = CliRunner().invoke(cli, ["bench", *args])
    return res, res.output


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sharegpt_prompts_are_the_first_human_turns(tmp_path, workers):
    data = tmp_path / "sharegpt.json"
    data.write_text(json.dumps(CONVERSATIONS))
    with serving(ttft_ms=5, itl_ms=1, model="perfkit-lab") as url:
        res, out = _bench("--url", url, "--model", "perfkit-lab", "--max-concurrency", "2", "--num-prompts", "6",
                          "--dataset-name", "sharegpt", "--dataset-path", str(data), "--no-calibrate",
                          "--warmup", "0", "--workers", workers, "-o", str(tmp_path / "r.json"))  # fmt: skip
    assert res.exit_code == 0, out
    doc = json.loads((tmp_path / "r.json").read_text())
    # the lab server counts a prompt's words as its tokens: 6 requests over 3 usable conversations
    assert doc["total_input_tokens"] == 2 * sum(len(p.split()) for p, _ in USED)
    # output lengths: each reply's characters over 4 (no tokenizer given), asked of the server
    assert doc["total_output_tokens"] == 2 * sum(math.ceil(len(r) / 4) for _, r in USED)
    assert "sharegpt sharegpt.json: 3 conversations" in doc["meta"]["prompts"]


@pytest.mark.parametrize(
    "content, says",
    [
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
        ('[{"conversations": [}]', "invalid JSON"),
        ('{"conversations": []}', "a JSON list of conversations"),
        ('[{"id": "x", "conversations": [{"from": "human", "value": "hi"}]}]', "no conversation"),
        ('[{"id": 1, "n": ' + "9" * 4301 + "}]", "an integer of 4301 digits"),
    ],
)
def test_a_broken_sharegpt_file_is_one_line_naming_it(tmp_path, content, says):
    data = tmp_path / "bad.json"
    data.write_text(content)
    res, out = _bench("--url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1",
                      "--dataset-name", "sharegpt", "--dataset-path", str(data), "--no-calibrate",
                      "-o", str(tmp_path / "r.json"))  # fmt: skip
    assert res.exit_code == 2, out
    assert str(data) in out and says in out and "Traceback" not in out


def test_dataset_options_go_together(tmp_path):
    res, out = _bench("--url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1",
                      "--dataset-name", "sharegpt", "--no-calibrate", "-o", str(tmp_path / "r.json"))  # fmt: skip
    assert res.exit_code == 2 and "--dataset-path" in out
    res, out = _bench("--url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1",
                      "--dataset-path", "x.json", "--no-calibrate", "-o", str(tmp_path / "r.json"))  # fmt: skip
    assert res.exit_code == 2 and "--dataset-name sharegpt" in out
