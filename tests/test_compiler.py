"""The compiler driver: stages in order, dumps a reader can follow."""
from pyxla.compiler import compile_module
from pyxla.hlo import parse_module

from .fusion.programs import LAYER_NORM


def test_dump_has_every_stage_fusion_decisions_and_buffers(tmp_path):
    compiled = compile_module(parse_module(LAYER_NORM), dump_dir=str(tmp_path))
    folder = tmp_path / "layer_norm"
    names = sorted(p.name for p in folder.iterdir())
    assert names[0] == "000.input.hlo"
    assert any(n.endswith(".fusion.hlo") for n in names) and any(n.endswith(".schedule.hlo") for n in names)
    fused_text = next((folder / n) for n in names if n.endswith(".fusion.hlo")).read_text()
    assert "kind=kInput" in fused_text and parse_module(fused_text) is not None
    decisions = (folder / "fusion-decisions.txt").read_text()
    assert "fuse %" in decisions
    buffers = (folder / "buffer-assignment.txt").read_text()
    assert buffers.startswith("buffer assignment of main: arena")
    assert f"arena {compiled.buffers.arena_size} bytes" in buffers
    assert set(compiled.stage_seconds) == {"passes, fusion, schedule", "buffer assignment"}
