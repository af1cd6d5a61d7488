"""``--lang zh`` beyond the checklists: alert titles, the verdict, panel titles, the help
screen and the header, from data files (``tui/data/i18n/zh.json``, the checklists'
``verdict``), with English wherever a word has no translation."""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path

import pytest
from dltop.tui.app.app import DltopApp
from dltop.tui.app.chart import Chart
from dltop.tui.app.help import KEYS, HelpScreen
from dltop.tui.core.diagnosis.checklists import checklist_for, load_checklist
from dltop.tui.core.present.panels import PANELS
from dltop.tui.core.rules.alerts import ALERT_IDS, Alert
from dltop.tui.core.text import i18n
from test_app_support import NAN_STEP, end_time, screen_text, write_log

DATA = Path(__file__).resolve().parents[2] / "tui" / "data"


def test_every_alert_id_has_a_chinese_title_and_verdict() -> None:
    words = i18n.words("zh")
    assert words is not None
    for alert_id in ALERT_IDS:
        assert words.alerts.get(alert_id), f"no zh title for {alert_id}"
        zh = load_checklist(alert_id, "zh")
        assert zh is not None, alert_id
        own = tomllib.loads((DATA / "checklists" / "zh" / f"{alert_id}.toml").read_text())
        assert own.get("verdict"), f"no zh verdict template in zh/{alert_id}.toml"
        assert zh.verdict == (own["verdict"],) or list(zh.verdict) == own["verdict"]


def test_every_checklist_with_an_english_verdict_has_a_chinese_one() -> None:
    for path in sorted((DATA / "checklists" / "en").glob("*.toml")):
        if "verdict" in tomllib.loads(path.read_text()):
            zh = tomllib.loads((DATA / "checklists" / "zh" / path.name).read_text())
            assert zh.get("verdict"), path.name


@pytest.mark.parametrize(
    ("alert_id", "title", "said"),
    [
        ("nan_loss", "Loss is NaN", "损失为 NaN"),
        ("nan_loss", "B Loss is NaN", "B 损失为 NaN"),  # an overlay's run letter kept
        ("divergence", "r0,2 Loss is diverging", "r0,2 损失发散"),  # not "损失为 diverging"
        ("straggler", "Rank 3 is a straggler (data loading)", "rank 3 拖慢了整个作业（数据加载）"),
        (
            "oom",
            "GPU out of memory (handled: training went on)",
            "GPU 显存不足（已处理：训练继续）",
        ),
        ("crash", "Some title no rule writes", "训练崩溃：Some title no rule writes"),
    ],
)
def test_alert_titles_are_translated_where_shown(alert_id: str, title: str, said: str) -> None:
    assert i18n.tr_title(alert_id, title, "zh") == said
    assert i18n.tr_title(alert_id, title, "en") == title  # the rules' English, untouched


def test_untranslated_text_and_unknown_languages_fall_back_to_english() -> None:
    assert i18n.tr("loss", "zh") == "损失" and i18n.tr("loss", "en") == "loss"
    assert i18n.tr("a phrase nobody translated", "zh") == "a phrase nobody translated"
    assert i18n.tr("loss", "xx") == "loss" and i18n.tr("loss", "../../etc") == "loss"


def test_the_verdict_in_chinese() -> None:
    from dltop.tui.core.diagnosis.verdict import fault_line

    alert = Alert("nan_loss", "critical", 240, "Loss is NaN", "", {"nonfinite_steps": 80})
    line = fault_line(alert, {}, 320, "zh")
    assert line.startswith("损失为 NaN，自第 240 步起（320 步中有 80 步）"), line
    assert checklist_for(alert, "zh").action and "—" in line


async def _zh_app(tmp_path: Path) -> tuple[str, list[str], str, str]:
    log = write_log(tmp_path / "run.jsonl", "nan", NAN_STEP + 20)
    app = DltopApp(str(log), follow=False, now=end_time(NAN_STEP + 20) + 3, lang="zh")
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(60):
            await pilot.pause(0.05)
            if app.ended:
                break
        app.redraw()
        await pilot.pause()
        screen = screen_text(app)
        titles = [
            str(app.query_one(f"#panel-{p.key}", Chart).border_title)
            for p in PANELS
            if p.key != "gpu"
        ]
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        help_text = screen_text(app)
        header = screen.splitlines()[0] + "\n" + screen.splitlines()[1]
    return screen, titles, help_text, header


def test_the_viewer_in_chinese(tmp_path: Path) -> None:
    screen, titles, help_text, header = asyncio.run(_zh_app(tmp_path))
    assert "损失为 NaN" in screen  # the alert's badge and the checklist pane's title
    assert titles[0] == "1 损失" and "2 梯度范数（对数）" in titles
    assert "dltop 按键" in help_text and "退出" in help_text
    assert KEYS[0][0] in help_text  # the keys themselves stay keys
    assert "已结束" in header or "运行中" in header or "已崩溃" in header
    assert "自第 240 步起" in screen  # the verdict line
