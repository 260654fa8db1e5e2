"""The performance study in one call: chips, model costs, latency, achieved performance and
training, for a set of models, batch sizes and devices; see ``run_study``.

    fxroof.study.run_study(StudyConfig(models=["resnet18", "vit_b_16"], batches=[1, 8]),
                           "quick/")
"""
from __future__ import annotations

from fxroof.chips import load_chips
from fxroof.device import check_device
from fxroof.errors import FxroofError
from fxroof.roofline import cudnn_search
from fxroof.study.cache import Cache, claim, locked, read_manifest
from fxroof.study.report import write_report
from fxroof.study.sweep import DEFAULT_MODELS, StudyConfig, Sweep, measure_roofs
from fxroof.study.tables import collect

__all__ = ["run_study", "StudyConfig", "DEFAULT_MODELS"]


def run_study(config: StudyConfig, out: str, force: bool = False, report_only: bool = False,
              progress: bool = True) -> dict:
    """Run (or resume) the study in folder ``out`` and write its report; returns the report
    paths. ``report_only`` redraws the report from the cached results without running
    anything (the folder's own settings are used)."""
    cache = Cache(out)
    if report_only:
        config = _saved_config(out)
    else:
        for device in config.devices:
            check_device(device)  # before any work: CUDA asked for but absent
            config.check_train_batches(device)
        config.check_allocator()
        config.check_freeze()
        config = config.resolved()
        # more rounds measure more of the same points; fewer price from the first ones
        claim(out, config.as_dict(), force, defaults=StudyConfig().as_dict(),
              resumable=("rounds",))
    # the whole study's setting (recorded in its folder): every measuring process runs with
    # it (fxroof.latency.in_fresh_process passes it on), and every prediction reads it
    with locked(out), cudnn_search(config.cudnn_benchmark):
        chips = measure_roofs(config, cache, force and not report_only, progress,
                              allow_measure=not report_only)
        if not report_only:
            Sweep(config, cache, force, progress).run()
        tables = collect(config, cache, chips)
        if not tables.rows:
            raise FxroofError(f"No model of the study in '{out}' has results yet, so there is "
                              "no report to draw: run the study (without --report-only) first.")
        return write_report(tables, out, list(load_chips().values()))


def _saved_config(out: str) -> StudyConfig:
    settings = read_manifest(out)
    try:
        return StudyConfig(**settings)
    except TypeError:
        raise FxroofError(f"'{out}/study.json' does not hold the settings of a study this "
                          "fxroof can read: run the study again with --force.") from None
