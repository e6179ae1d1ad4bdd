import pytest

from sagegraph.config import load_config
from sagegraph.errors import ConfigError


def test_shipped_ottqa_config_validates():
    cfg = load_config("conf/ottqa.yaml")
    assert cfg.edges.percentile == 95 and cfg.edges.logic == "or" and cfg.chunking.percentile == 20
    assert cfg.out.is_absolute()


def test_invalid_config_lists_every_problem(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("edges:\n  logic: xor\n  percentile: 120\ntables:\n  rows_per_segment: 3\nbogus: 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(p)
    msg = str(err.value)
    assert "edges.logic" in msg and "edges.percentile" in msg and "tables.rows_per_segment" in msg and "bogus" in msg
    assert msg.startswith(str(p))


def test_yaml_syntax_error_names_line(tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("name: x\nedges: [1,\n")
    with pytest.raises(ConfigError, match=r"broken.yaml:\d+: not valid YAML"):
        load_config(p)


def test_relative_paths_resolve_against_project_root(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "c.yaml").write_text("out: work/x\ncorpus:\n  kind: kb\n  path: data/kb\n")
    cfg = load_config(conf / "c.yaml")
    assert cfg.out == (tmp_path / "work/x").resolve() and cfg.corpus.path == (tmp_path / "data/kb").resolve()


def test_variant_config_extends_its_base():
    cfg = load_config("conf/ottqa_demo.yaml")
    assert (
        cfg.max_sources == 2000 and cfg.name == "ottqa-demo" and cfg.edges.top_m == 50 and cfg.out.name == "ottqa-demo"
    )
