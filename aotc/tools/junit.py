"""`aotc verify --junit`: a verify report as JUnit XML, which CI systems show per test."""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

from aotc.tools.verify import Report


def junit_xml(report: Report) -> str:
    """One test case per artifact and entry; a failure element for each mismatch."""

    failures = sum(not c.passed for c in report.checks)
    lines = ['<?xml version="1.0" encoding="utf-8"?>',
             f'<testsuite name="aotc verify" tests="{len(report.checks)}" failures="{failures}">']
    for c in report.checks:
        case = f'  <testcase classname={quoteattr(c.artifact)} name={quoteattr(c.name)}'
        if c.passed:
            lines.append(case + "/>")
        else:
            message = f"max abs {c.max_abs:.3g}, max rel {c.max_rel:.3g} (rtol {c.rtol:g}, atol {c.atol:g}) {c.note}"
            lines += [case + ">", f"    <failure message={quoteattr(message.strip())}/>", "  </testcase>"]
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"
