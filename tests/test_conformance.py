"""`perfsuite check`, the conformance battery (issue 12): the built-in variants pass it, deliberately broken
selectors are caught with the right finding, the graph case runs on the simulated GPU, and the command
line prints a row per case, writes the CSV and exits 1 on a failure, 2 on a selector that does not load."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from perfsuite import cli, kernels, simulated_gpu
from perfsuite.correctness import conformance
from perfsuite.correctness.conformance import battery_patterns as catalogue
from perfsuite.correctness.conformance import consistency, judge
from perfsuite.variants import external

DATA = Path(__file__).parent / "data"
BF16 = torch.bfloat16
TRITON_CASES = ["vocab_2", "vocab_7", "padded_rows_1031", "offset_3", "nan_and_posinf", "neginf_all"]
TRITON_CASES += ["bit_patterns", "masked"]
"""The Triton interpreter is slow on a CPU: the Triton variants run this subset here, in bf16 (the CLI's
default is the full battery, and scripts/gpu_check.sh runs it on a GPU)."""


@pytest.fixture(autouse=True)
def selectors(monkeypatch):
    """tests/data importable, and no selector loaded by another test."""
    monkeypatch.syspath_prepend(str(DATA))
    monkeypatch.setattr(external, "_LOADED", {})


def verdicts(table: pd.DataFrame) -> set[str]:
    return set(table["verdict"])


def failing(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["verdict"] == "FAIL"]


def fp32(name: str, device: object, *cases: str) -> pd.DataFrame:
    """The battery's float32 rows for `cases` (the graph case when none)."""
    return conformance.run(name, device, cases=list(cases or ["graph_replay"]), dtypes=[torch.float32])


BUILT_INS = [("identity", None), ("full_softmax", [torch.bfloat16, torch.float16])]
BUILT_INS += [("argmax_ones", [torch.float32, torch.bfloat16])]


@pytest.mark.parametrize(("name", "dtypes"), BUILT_INS)
def test_torch_built_ins_pass_the_quick_battery(name, dtypes, device):
    table = conformance.run(name, device, quick=True, dtypes=dtypes)
    assert failing(table).empty, conformance.console(table)
    assert (table["verdict"] == "pass").sum() >= 80
    skips = table[table["verdict"] == "skip"]
    assert set(skips["case"]) <= {"*", "graph_replay", "int64_addressing"}
    if dtypes is None:  # float8 is recorded as not claimed, not run
        fp8 = skips[skips["dtype"].str.startswith("float8")]
        assert len(fp8) == len(conformance.battery.DTYPES) - 3
        assert fp8["detail"].str.startswith("not claimed").all()


@pytest.mark.triton
@pytest.mark.parametrize("name", ["triton_fused", "triton_split"])
def test_triton_variants_pass_a_subset_of_the_battery(name, device):
    if kernels.availability(device):
        pytest.skip(kernels.availability(device))
    table = conformance.run(name, device, cases=TRITON_CASES, dtypes=[torch.bfloat16])
    assert "FAIL" not in verdicts(table), conformance.console(table)
    skips = table[table["verdict"] == "skip"]  # the interpreter's bf16 subnormals, named as such
    assert skips["detail"].str.startswith(judge.INTERPRETER_REASON).all()
    assert set(skips["case"]) <= {"bit_patterns"}
    assert len(table) == len(TRITON_CASES) * 2
    if device.type == "cpu":  # the interpreter runs the batches of 1, 2 and 17 rows of the axis only
        assert set(table["batch_largest"].dropna()) == {max(consistency.INTERPRETED_BATCHES)}


@pytest.mark.parametrize(
    ("function", "case", "finding", "seen"),
    [
        ("unmasked_tail", "padded_rows_1031", "out_of_vocab", "outside [0, 1031)"),
        ("highest_index_ties", "ties_far", "wrong_tie", "index 8188, the lowest index of the tie is 3"),
        ("ones_claimed_exact", "vocab_100", "wrong_prob", "topk_p 1 where softmax is"),
        ("nan_to_vocab", "nan_one", "out_of_vocab", "index 1031 outside [0, 1031)"),
        ("naive_softmax", "huge", "nan_prob", "topk_p nan where softmax is"),
        ("aligned_only", "vocab_7", "crash", "ValueError: vocab 7 must be a multiple of 8"),
    ],
)
def test_broken_selectors_are_caught_with_the_right_finding(function, case, finding, seen):
    table = fp32(f"broken_selectors:{function}", "cpu", case)
    assert len(table) == 2 and verdicts(table) == {"FAIL"}
    assert set(table["finding"]) == {finding}
    assert table["detail"].str.contains(seen, regex=False).all(), table["detail"].tolist()
    assert not table["detail"].str.contains("\n").any()  # one line, crashes included


def test_bugs_show_only_where_their_case_is():
    table = fp32("broken_selectors:nan_to_vocab", "cpu", "vocab_100", "neginf_all", "nan_all")
    by_case = table.groupby("case")["verdict"].agg(set).to_dict()
    assert by_case == {"vocab_100": {"pass"}, "neginf_all": {"pass"}, "nan_all": {"FAIL"}}


def test_int32_row_offsets_fail_past_two_to_the_32_elements():
    cases = ["int64_addressing", "offset_3"]
    table = conformance.run("broken_selectors:int32_row_offsets", "cpu", cases=cases, dtypes=[torch.bfloat16])
    int64 = table[table["case"] == "int64_addressing"]
    if set(int64["verdict"]) == {"skip"}:
        pytest.skip(f"this machine: {int64['detail'].iloc[0]}")
    assert set(int64["finding"]) == {"wrong_topk"} and int64["detail"].str.contains("row 2 slot 0").all()
    assert int64["row_stride"].eq(catalogue.INT64_STRIDE).all()
    assert set(table[table["case"] == "offset_3"]["verdict"]) == {"pass"}


def test_int64_rows_do_not_commit_the_whole_buffer():
    """On a CPU the buffer behind the int64 case is address space, not memory: only the rows are touched."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        case = next(c for c in catalogue.catalogue() if c.name == "int64_addressing")
        logits = case.build(torch.bfloat16, torch.device("cpu"))
    except catalogue.Skip as skip:
        pytest.skip(f"this machine: {skip}")
    assert logits.stride(0) * 2 + logits.shape[1] > 1 << 32
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 < 1 << 30


def test_poison_lies_where_an_over_read_would_find_it():
    logits = catalogue.place(torch.zeros(2, 5), torch.bfloat16, torch.device("cpu"), offset=3, stride=8)
    flat = torch.as_strided(logits, (logits.untyped_storage().nbytes() // 2,), (1,), 0)
    poison = catalogue.poison_value(torch.bfloat16)
    assert logits.storage_offset() == 3 and logits.stride() == (8, 1)
    assert flat[:3].eq(poison).all() and flat[8:11].eq(poison).all() and flat[16:].eq(poison).all()
    assert logits.eq(0).all()


def test_a_selector_declaring_fp8_is_judged_on_fp8():
    cases = ["vocab_100", "huge", "ties_far"]
    table = conformance.run("selectors_for_tests:fp8_topk", "cpu", cases=cases, quick=True)  # quick batches
    judged = table[table["case"] != "*"]
    assert set(judged["dtype"]) == {"bfloat16", *(str(d)[6:] for d in conformance.battery.DTYPES[3:])}
    assert verdicts(judged) == {"pass"}, conformance.console(table)
    unclaimed = table[table["case"] == "*"]
    assert set(unclaimed["dtype"]) == {"float32", "float16"} and verdicts(unclaimed) == {"skip"}


def test_graph_capture_on_the_simulated_gpu(gpu):
    for name in ("identity", "argmax_ones", "selectors_for_tests:preallocated_topk"):
        table = fp32(name, gpu)
        assert verdicts(table) == {"pass"}, conformance.console(table)
    syncs = fp32("broken_selectors:syncs_on_host", gpu)
    assert set(syncs["finding"]) == {"host_sync"}
    assert syncs["detail"].str.contains("not permitted when stream is capturing").all()
    assert set(fp32("broken_selectors:stale_staging", gpu)["finding"]) == {"graph_differs"}
    eager = fp32("broken_selectors:stale_staging", gpu, "vocab_100")
    assert verdicts(eager) == {"pass"}  # right eagerly: only the graph shows it


CAPTURE_UNSAFE = [
    ("masks_nan_rows", "with a boolean mask"),  # x[mask]: nonzero's host sync
    ("host_row_index", "with an index on the host"),  # logits[torch.arange(B)]: a pageable upload
]


@pytest.mark.parametrize(("function", "reason"), CAPTURE_UNSAFE)
def test_capture_unsafe_indexing_passes_eagerly_and_fails_the_graph_case(gpu, function, reason, capsys):
    """Indexing that real CUDA refuses in a capture: every eager case passes, the graph case fails with a
    host sync named in its detail (on the simulated GPU: which pattern; on a GPU: torch's own message), and
    `perfsuite check` prints the finding."""
    table = conformance.run(f"broken_selectors:{function}", gpu, quick=True, dtypes=[torch.float32])
    graph = table[table["case"] == "graph_replay"]
    eager = table[(table["case"] != "graph_replay") & (table["verdict"] != "skip")]
    assert len(eager) >= 40 and verdicts(eager) == {"pass"}, conformance.console(table)
    assert len(graph) == 2 and verdicts(graph) == {"FAIL"} and set(graph["finding"]) == {"host_sync"}
    assert graph["detail"].str.startswith("during capture: ").all()
    if simulated_gpu.active():
        assert graph["detail"].str.contains("not permitted when stream is capturing").all()
        assert graph["detail"].str.contains(reason).all(), graph["detail"].tolist()
    assert torch.cuda.current_stream() is torch.cuda.default_stream()  # the failed captures gave it back
    argv = ["check", f"broken_selectors:{function}", "--case", "graph_replay", "--dtype", "fp32"]
    assert cli.main([*argv, "--device", str(gpu)]) == 1
    out = capsys.readouterr().out
    assert "FAIL host_sync" in out and "FAIL graph_replay float32 k=1: during capture: " in out
    assert reason in out or not simulated_gpu.active()


def test_graph_case_is_a_skip_without_a_gpu():
    table = fp32("identity", "cpu")
    assert verdicts(table) == {"skip"} and table["detail"].eq(conformance.battery.NEEDS_GPU).all()


def test_check_prints_a_row_per_case_writes_csv_and_exits_1_on_a_failure(tmp_path, capsys):
    csv = tmp_path / "check.csv"
    argv = ["check", "identity", "broken_selectors:highest_index_ties", "--case", "ties_far", "--case"]
    code = cli.main([*argv, "vocab_7", "--dtype", "bf16", "--device", "cpu", "--csv", str(csv)])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL wrong_tie" in out and "FAIL ties_far bfloat16 k=1: wrong tie" in out
    assert "identity: 4 pass" in out and "broken_selectors:highest_index_ties: 2 pass, 2 FAIL" in out
    table = pd.read_csv(csv)
    assert len(table) == 8 and list(table.columns) == list(conformance.battery.COLUMNS)

    assert cli.main(["check", "identity", "--case", "vocab_7", "--dtype", "fp32", "--device", "cpu"]) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["no_such_module:topk"], "cannot import no_such_module"),
        (["no_such_variant"], "unknown variant 'no_such_variant'"),
        (["selectors_for_tests:undeclared"], "no contract declared"),
        (["identity", "--case", "nope*"], "no battery case matches nope*"),
        (["identity", "--dtype", "int8"], "unknown dtype 'int8'"),
    ],
)
def test_check_refuses_bad_input_in_one_line(argv, message, capsys):
    assert cli.main(["check", *argv, "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_declared_dtypes_are_validated():
    with pytest.raises(external.ExternalSelectorError, match="contract key 'dtypes' holds 'int8'"):
        external.selector(accuracy="exact", dtypes=["bfloat16", "int8"])(lambda logits, k: None)
    with pytest.raises(external.ExternalSelectorError, match="must be a non-empty list"):
        external.contract("x", {"accuracy": "exact", "dtypes": []})
    assert external.contract("x", {"accuracy": "exact", "dtypes": "bfloat16"}).dtypes == ("bfloat16",)


def test_an_argmax_kernel_declaring_max_k_1_is_judged_at_k_1_and_skips_the_rest():
    table = conformance.run("selectors_for_tests:argmax_k1", "cpu", quick=True)
    assert "FAIL" not in verdicts(table)
    timed = table[table["case"] != "graph_replay"].dropna(subset=["k"])
    assert set(timed[timed["k"] == 1]["verdict"]) == {"pass"}
    wider = timed[timed["k"] > 1]
    assert len(wider) and set(wider["verdict"]) == {"skip"}
    assert set(wider["detail"]) == {"not claimed: the selector declares topk <= 1"}


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "1"])
def test_max_k_is_validated(value):
    with pytest.raises(external.ExternalSelectorError, match=r"contract key 'max_k' is .*an integer >= 1"):
        external.contract("x", {"accuracy": "exact", "max_k": value})


SELECTORS_DOC = Path(__file__).parent.parent / "docs" / "selectors.md"


def test_the_documented_vllm_recipe_passes_the_battery(tmp_path, monkeypatch):
    """The one engine recipe that runs on a CPU (vLLM's greedy argmax, plain torch) is checked as written
    (docs/selectors.md)."""
    text = SELECTORS_DOC.read_text()
    start = text.index("vLLM's greedy path")
    opening = text.index("```python\n", start) + len("```python\n")
    block = text[opening : text.index("```", opening)]
    (tmp_path / "vllm_recipe.py").write_text("import torch\n" + block)
    monkeypatch.syspath_prepend(str(tmp_path))
    table = conformance.run("vllm_recipe:vllm_greedy", "cpu", quick=True)
    assert "FAIL" not in verdicts(table), failing(table)[["case", "dtype", "k", "detail"]]
    assert "pass" in verdicts(table)


def failing_cases(table: pd.DataFrame) -> set[str]:
    return set(failing(table)["case"])


NEW_CASE_BUGS = [
    ("careless_radix", {"bit_patterns"}, "wrong_tie", "index 900, the lowest index of the tie is 100"),
    ("packed_31_bit_keys", {"bit_patterns"}, "wrong_topk", "row 2 slot 0: index 30 (logit 1) where"),
    ("vector_of_four", {"vocab_1", "vocab_2"}, "out_of_vocab", "index 3 outside [0, "),  # and vocab_3 (full)
    ("sparse_mask_path", {"masked"}, "wrong_topk", "row 2 slot 0"),
    ("nan_claimed_smallest", {"nan_one", "nan_and_posinf"}, "nan_order", "517 (logit nan) where NaN small"),
    ("batch_size_ties", {"bit_patterns", "masked", "ties_far"}, "batch_variant", "indices depend on its"),
]  # fmt: skip
"""(broken selector, the cases it fails, its finding, what its detail shows) for the issue-22 checks."""


@pytest.mark.parametrize(("function", "cases", "finding", "seen"), NEW_CASE_BUGS)
def test_broken_kernel_designs_fail_only_on_their_case(function, cases, finding, seen):
    """Bit-level order, tiny vocabularies, grammar masks, the NaN policy, batch invariance: each bug fails
    its case (or check) and passes every other row of the battery."""
    table = conformance.run(f"broken_selectors:{function}", "cpu", quick=True)
    assert failing_cases(table) == cases, conformance.console(table)
    assert set(failing(table)["finding"]) == {finding}
    assert failing(table)["detail"].str.contains(seen, regex=False).any(), failing(table)["detail"].tolist()


def test_tiny_vocabularies_run_every_k_up_to_v():
    ks = {c.name: c.topks() for c in catalogue.catalogue() if c.name in {"vocab_1", "vocab_3", "vocab_17"}}
    assert ks == {"vocab_1": [1], "vocab_3": [1, 2, 3], "vocab_17": [1, 8, 16, 17]}


def test_bit_pattern_rows_hold_exact_ties_and_near_ties_in_every_dtype():
    case = next(c for c in catalogue.catalogue() if c.name == "bit_patterns")
    for dtype in conformance.battery.DTYPES:
        raw = case.build(dtype, torch.device("cpu"))
        x = raw.float()
        assert x[0, 100] == x[0, 900] == 0 and x[0, 100].signbit() and not x[0, 900].signbit()
        ints = {1: torch.int8, 2: torch.int16, 4: torch.int32}[dtype.itemsize]
        bits = raw[2, [30, 800]].contiguous().view(ints)
        assert int(bits[1]) - int(bits[0]) == 1 and x[2, 800] > x[2, 30]  # one ulp apart
        subnormal = x[3, 700].abs()
        assert 0 < subnormal < torch.finfo(dtype).tiny and x[3, 700] == x[3, 701] > x[3, 50]
        assert x[4, 600] == torch.finfo(dtype).max > x[4, 3]


def test_ties_that_change_from_call_to_call_fail_the_repeat():
    table = conformance.run("broken_selectors:arrival_order_ties", "cpu", quick=True, dtypes=[torch.float32])
    bad = failing(table)
    assert set(bad["finding"]) == {"not_repeatable"} and set(bad["repeat"]) == {"FAIL"}
    assert {"ties_far", "all_equal", "bit_patterns", "masked"} <= set(bad["case"])
    assert "differ between two calls on the same logits" in bad["detail"].iloc[0]
    untied = table[table["case"].isin(["vocab_7", "padded_rows_1031"])]
    assert set(untied["verdict"]) == {"pass"} and set(untied["repeat"]) == {"pass"}


def test_repeat_and_batch_invariance_are_columns_and_in_the_console():
    table = conformance.run("identity", "cpu", cases=["ties_far", "vocab_3"], dtypes=[BF16])
    assert set(table["repeat"]) == {"pass"}
    checked = table[table["case"] == "ties_far"]
    assert set(checked["batch_invariant"]) == {"pass"} and (checked["batch_max_dp"] <= 1e-6).all()
    assert table[table["case"] == "vocab_3"]["batch_invariant"].isna().all()  # not a batch_check case
    text = conformance.console(table)
    header = text.splitlines()[1].split()
    assert header[-2:] == ["repeat", "batch"] and "NaN largest" in text.splitlines()[0]
    broken = conformance.run("broken_selectors:batch_size_ties", "cpu", cases=["ties_far"], dtypes=[BF16])
    assert " FAIL" in conformance.console(broken).splitlines()[2].split("bfloat16")[-1]


def test_the_nan_policy_is_a_contract_key():
    assert external.contract("x", {"accuracy": "exact", "nan": "smallest"}).nan == "smallest"
    assert external.contract("x", {"accuracy": "exact"}).nan == "unspecified"
    with pytest.raises(external.ExternalSelectorError, match="contract key 'nan' is 'first'; allowed: "):
        external.contract("x", {"accuracy": "exact", "nan": "first"})
    table = fp32("selectors_for_tests:exact_topk", "cpu", "nan_*")
    assert verdicts(table) == {"pass"} and set(table["nan"]) == {"unspecified"}  # NaN rows: indices in range


def test_work_on_the_default_stream_is_flagged_on_the_simulated_gpu(gpu):
    ok = fp32("identity", gpu, "vocab_100", "ties_far")
    assert verdicts(ok) == {"pass"}, conformance.console(ok)
    table = fp32("broken_selectors:default_stream", gpu, "vocab_100")
    assert verdicts(table) == {"FAIL"} and set(table["finding"]) == {"wrong_stream"}
    flagged = "kernel(s) ran on another stream than the caller's side stream"
    assert table["detail"].str.contains(flagged, regex=False).all()
    assert torch.cuda.current_stream() is torch.cuda.default_stream()
    on_cpu = conformance.run("broken_selectors:default_stream", "cpu", cases=["vocab_100"])
    assert verdicts(on_cpu) == {"pass", "skip"}


def test_the_simulated_gpu_records_the_stream_of_each_kernel(gpu):
    side = torch.cuda.Stream()
    before = simulated_gpu.kernels_by_stream()
    with torch.cuda.stream(side):
        torch.ones(4, device="cuda").add_(1)
    after, default = simulated_gpu.kernels_by_stream(), torch.cuda.default_stream()
    assert after.get(side, 0) >= 2 and after.get(default, 0) == before.get(default, 0)


@pytest.mark.triton
def test_a_correct_triton_kernel_gets_no_fail_from_the_interpreter(device):
    """Our own masked Triton argmax (tests/data/interpreted_argmax.py) in the interpreter: its bf16
    subnormal rows come out wrong there, and the battery says it is the interpreter's doing."""
    if kernels.availability(device):
        pytest.skip(kernels.availability(device))
    table = conformance.run(
        "interpreted_argmax:masked_argmax", device, cases=["subnormal", "bit_patterns", "vocab_100"],
        dtypes=[torch.float32, torch.bfloat16],
    )  # fmt: skip
    assert "FAIL" not in verdicts(table), conformance.console(table)
    excused = table[table["detail"].str.startswith(judge.INTERPRETER_REASON)]
    assert set(zip(excused["case"], excused["dtype"], strict=True)) == {("subnormal", "bfloat16")}
    assert excused["detail"].str.contains("FAIL wrong top-k on subnormal rows 0, 1").all()
    assert set(table[table["k"] == 1]["verdict"]) == {"pass", "skip"}


def test_only_interpreted_launches_on_bf16_subnormal_rows_are_excused():
    from perfsuite import variants

    identity = variants.get("identity")
    logits = torch.tensor([[1e-39, 0.0], [1.0, 2.0]], dtype=torch.bfloat16)
    p, index = identity(logits, 1)
    index[0, 0] = 1  # wrong on the subnormal row only

    def excused(logits: torch.Tensor, launched: int) -> judge.Verdict:
        return judge.excused(
            judge.judge(identity, logits, 1, p, index), launched, identity, logits, 1, (p, index)
        )

    skip = excused(logits, 1)
    assert skip.status == "skip" and skip.detail.startswith(judge.INTERPRETER_REASON)
    assert skip.detail.endswith("; FAIL wrong top-k on subnormal rows 0)")
    assert excused(logits, 0).finding == "wrong_topk"  # torch ops: no interpreter to blame
    assert excused(logits.float(), 1).finding == "wrong_topk"  # fp32 converts right
    index[1, 0] = 0
    assert excused(logits, 1).finding == "wrong_topk"  # fails elsewhere too


def test_a_preallocated_selector_cannot_overwrite_the_first_call_s_outputs():
    """The repeat compares two calls: on a CPU too they are copies, not the adapter's reused buffers."""
    from perfsuite import variants
    from perfsuite.correctness import edge_cases

    variant = variants.get("selectors_for_tests:preallocated_topk")
    first = edge_cases.call(variant, torch.tensor([[1.0, 2.0, 3.0]]), 1)
    edge_cases.call(variant, torch.tensor([[3.0, 2.0, 1.0]]), 1)
    assert first[1].tolist() == [[2]]


# the batch axis (issue 40): a case's rows in batches across the thresholds kernels switch plans at
LARGE_BATCH_BUGS = [  # (selector, its threshold, the cases it fails, the first quick batch at or above it)
    ("ties_from_17", 17, {"bit_patterns", "ties_far"}, 17),  # ties: only tie rows show it
    ("bf16_from_64", 64, {"vocab_7", "bit_patterns", "ties_far"}, 65),
    ("tail_from_129", 129, {"vocab_7", "ties_far"}, 257),  # the tail: V = 8193's last column, V = 7's row
    ("last_row_from_257", 257, {"vocab_7", "bit_patterns"}, 257),
    ("bf16_from_1024", 1024, {"vocab_7", "bit_patterns"}, 1025),
]  # fmt: skip
"""Each runs on its cases, vocab_7 (V = 7, to 4096 rows) and vocab_100 (no batch axis). In --quick,
ties_far (V = 8193) runs batches up to 65 rows (QUICK_BATCH_LOGITS): larger thresholds show on the others."""


@pytest.mark.parametrize(("function", "threshold", "cases", "quick_batch"), LARGE_BATCH_BUGS)
def test_a_path_wrong_from_a_batch_threshold_up_fails_naming_the_batch(
    function, threshold, cases, quick_batch
):
    """Right at every batch below the threshold: the full axis names the threshold itself, the quick one
    the first of its batches at or above it; the other cases pass."""
    run = sorted(cases | {"vocab_7", "vocab_100"})
    table = fp32(f"broken_selectors:{function}", "cpu", *run)
    bad = failing(table)
    assert failing_cases(table) == cases, conformance.console(table)
    assert set(bad["finding"]) == {"batch_variant"} and set(bad["batch_invariant"]) == {"FAIL"}
    assert set(bad["batch_worst"]) == {threshold}
    named = bad["detail"].str.contains(f"differ on batch {threshold}): its row ", regex=False)
    assert named.all(), bad["detail"].tolist()
    assert f"FAIL at {threshold}" in conformance.console(table)
    quick = failing(conformance.run(f"broken_selectors:{function}", "cpu", quick=True, cases=run))
    quick_cases = cases - {"ties_far"} if threshold > 65 else cases
    assert failing_cases(quick) == quick_cases and set(quick["batch_worst"]) == {quick_batch}


def test_a_call_that_raises_on_a_large_batch_is_a_crash_naming_it():
    table = fp32("broken_selectors:raises_from_1025", "cpu", "vocab_7")
    assert set(table["finding"]) == {"crash"} and set(table["batch_worst"]) == {1025}
    assert table["detail"].str.startswith("on batch 1025: RuntimeError: grid of 1025 programs").all()
    assert "FAIL at 1025" in conformance.console(table)


def test_the_batch_axis_crosses_every_power_of_two_and_keeps_the_case_s_layout():
    assert catalogue.BATCHES[:4] == (1, 2, 3, 4) and catalogue.BATCHES[-1] == 4096
    assert {2**n + d for n in range(2, 11) for d in (-1, 0, 1)} < set(catalogue.BATCHES)
    assert set(catalogue.QUICK_BATCHES) < set(catalogue.BATCHES) and max(catalogue.QUICK_BATCHES) == 1025
    logits = catalogue.place(
        catalogue.ordinary("axis", 3, 1031), BF16, torch.device("cpu"), offset=3, stride=1040
    )
    seen = set()
    for what, rows, order in consistency.other_batches(logits, False, catalogue.BATCHES):
        assert what == f"batch {len(order)}" and rows.shape == (len(order), 1031)
        assert rows.storage_offset() == 3 and rows.stride() == (1040, 1)
        assert torch.equal(rows, logits[order])
        seen |= {(int(order[0]), "first"), (int(order[-1]), "last")}
    assert len(order) == 4096 and seen == {(r, where) for r in range(3) for where in ("first", "last")}
    flat, poison = torch.as_strided(rows, (rows.untyped_storage().nbytes() // 2,), (1,), 0), 1e4
    assert flat[:3].eq(poison).all() and flat[1034:1043].eq(poison).all() and flat[-256:].eq(poison).all()

    def sizes(vocab: int, *full) -> list[int]:
        return [len(order) for *_, order in consistency.other_batches(torch.zeros(1, vocab), *full)]

    assert sizes(4099, False, (1025, 4096)) == [1025, 4096] and sizes(8193, False, (1025, 4096)) == [1025]
    assert sizes(1031) == list(catalogue.QUICK_BATCHES) and sizes(8193) == [1, 2, 17, 65]  # --quick's cap
    assert list(consistency.other_batches(logits[:0], False)) == []


@pytest.mark.parametrize("name", ["identity", "identity_engine_order", "full_softmax", "argmax_ones"])
def test_built_in_torch_selectors_pass_the_batch_axis_at_every_tile(name):
    cases = ["masked", "vocab_4095", "vocab_16385", "vocab_32000"]
    table = conformance.run(name, "cpu", cases=cases, dtypes=[BF16])
    assert verdicts(table) == {"pass"}, conformance.console(table)
    assert set(table["batch_invariant"]) == {"pass"} and set(table["k"]) >= {1, 8}
    largest = table.groupby("case")["batch_largest"].max().to_dict()
    assert largest == {"masked": 4096, "vocab_4095": 1025, "vocab_16385": 1025,
                       "vocab_32000": 257}  # fmt: skip


def test_the_console_and_csv_show_a_case_s_worst_batch(tmp_path, capsys):
    csv = tmp_path / "check.csv"
    argv = ["check", "selectors_for_tests:exact_topk", "broken_selectors:last_row_from_257", "--case"]
    assert cli.main([*argv, "bit_patterns", "--dtype", "fp32", "--device", "cpu", "--csv", str(csv)]) == 1
    out = capsys.readouterr().out
    assert "pass to 4096 0" in out and "FAIL at 257" in out
    assert "FAIL bit_patterns float32 k=1: row " in out and "differ on batch 257): its row 256 slot 0" in out
    table = pd.read_csv(csv)
    assert list(table.columns) == list(conformance.battery.COLUMNS)  # no column per batch
    assert table.groupby("selector")["batch_largest"].max().to_dict() == {
        "selectors_for_tests:exact_topk": 4096, "broken_selectors:last_row_from_257": 257
    }  # fmt: skip
    by_selector = table.groupby("selector")["batch_invariant"].agg(set).to_dict()
    assert by_selector == {
        "selectors_for_tests:exact_topk": {"pass"},
        "broken_selectors:last_row_from_257": {"FAIL"},
    }
    assert set(failing(table)["batch_worst"]) == {257}
