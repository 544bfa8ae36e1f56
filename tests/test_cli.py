"""``python -m wsgemm``: the inspect command compiles one configuration without a GPU
and reports it; a configuration the budgets or the arch reject is a one-line error
with exit status 2, not a traceback."""

from wsgemm.cli import main


def test_inspect_reports_a_dependent_launch_kernel(tmp_path, capsys):
    out = tmp_path / "artifacts"
    assert main(["inspect", "--arch", "sm_90a", "--tile", "64x64x64", "--dependent-launch", "--out", str(out)]) == 0
    report = capsys.readouterr().out
    assert "kernel sm90_bf16tobf16_akbkdn_64x64x64_c1x1_s13_e2_along_m_w1_before_copy_pdl" in report
    assert "programmatic dependent launch" in report and "griddepcontrol x3" in report
    assert "griddepcontrol.wait" in (out / "kernel.ptx").read_text()
    assert main(["inspect", "--arch", "sm_90a", "--tile", "64x64x64", "--dependent-launch", "--read-before-wait", "b",
                 "--out", str(out)]) == 0
    report = capsys.readouterr().out
    assert "_pdl_bearly\n" in report and "dependent launch, B's first 8 stages loaded before its wait" in report


def test_a_rejected_config_is_a_one_line_error(tmp_path, capsys):
    status = main(["inspect", "--arch", "sm_100f", "--dependent-launch", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("python -m wsgemm inspect: dependent_launch=True: ") and "sm90 kernel only" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["inspect", "--arch", "sm_90a", "--tile", "128x512x64", "--out", str(tmp_path)]) == 2
    assert "tile_n=512 is not supported" in capsys.readouterr().err


def test_inspect_reports_a_stream_k_kernel_and_its_fix_up(tmp_path, capsys):
    assert main(["inspect", "--arch", "sm_90a", "--tile", "128x128x64", "--stream-k", "--out", str(tmp_path)]) == 0
    report = capsys.readouterr().out
    assert "_streamk" in report and "last wave streamed (stream-K)" in report
    assert "red.release.gpu x1" in report
    assert main(["inspect", "--arch", "sm_90a", "--stream-k", "--split-k", "2", "--out", str(tmp_path)]) == 2
    assert "the last wave is either split or streamed" in capsys.readouterr().err


def test_inspect_reports_a_pingpong_kernel_and_rejects_a_tile_it_cannot_hold(tmp_path, capsys):
    assert main(["inspect", "--arch", "sm_90a", "--tile", "128x128x64", "--pingpong", "--out", str(tmp_path)]) == 0
    report = capsys.readouterr().out
    assert "_pingpong" in report and "ping-pong: each runs every other tile whole" in report
    assert "128 for accumulators" in report
    assert main(["inspect", "--arch", "sm_90a", "--tile", "128x256x64", "--pingpong", "--out", str(tmp_path)]) == 2
    assert "or pingpong=False" in capsys.readouterr().err


def test_inspect_reports_how_a_tall_tile_is_shared(tmp_path, capsys):
    assert main(["inspect", "--arch", "sm_90a", "--tile", "256x192x64", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "warpgroups 1..2 = wgmma consumers + epilogue, cooperative: 128 rows of each tile apiece" in text
    assert "192 for accumulators; ptxas compiles the kernel under 168" in text
    assert "wgmma.mma_async x8" in text  # two stacked per k-step


def test_loop_excerpts_pad_only_the_annotated_lines():
    from wsgemm.inspection import LoopExcerpt, format_excerpt

    excerpt = LoopExcerpt(lines=["  add.s32 %r1, %r2, 1;   ", "a.longer.instruction %r3;", "bra LOOP;"],
                          events=[(0, "probe: try_wait"), (2, "back-edge")])
    lines = format_excerpt(excerpt).splitlines()
    assert lines[1] == "a.longer.instruction %r3;"  # unannotated: no trailing blanks
    assert lines[0].index("<--") == lines[2].index("<--") == len("a.longer.instruction %r3;") + 2
    assert lines[0].startswith("add.s32 %r1, %r2, 1;") and lines[0].endswith("<-- probe: try_wait")
