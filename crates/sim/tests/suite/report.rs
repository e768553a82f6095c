//! `--report`: a scenario's page holds the three charts with the series the run implies.

use std::collections::BTreeMap;

/// Two nodes; queue a borrows b's half with two 8-GPU jobs, b takes it back at t=10 (one of
/// a's jobs is preempted, starts again at t=60 when b's 50 s job ends).
const SCENARIO: &str = "name: reclaim\n\
nodes:\n  - {name: \"n[1-2]\", resources: {gpu: 8}}\n\
queues:\n  - {name: a, quota: {gpu: 8}}\n  - {name: b, quota: {gpu: 8}}\n\
timeline:\n\
  - {at: 0, submit: {name: a1, queue: a, resources: {gpu: 8}, duration: 100, preemption_mode: requeue}}\n\
  - {at: 0, submit: {name: a2, queue: a, resources: {gpu: 8}, duration: 100, preemption_mode: requeue}}\n\
  - {at: 10, submit: {name: b1, queue: b, resources: {gpu: 4}, duration: 50}}\n";

/// Each `data-series` of one chart with its `data-points`, read from the SVG text.
fn series(svg: &str) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut out = BTreeMap::new();
    for part in svg.split("<g class=\"series\" data-series=\"").skip(1) {
        let name = part.split('"').next().unwrap().to_string();
        let points = attr(part, "data-points")
            .split(' ')
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        out.insert(name, points);
    }
    out
}

fn attr<'a>(text: &'a str, name: &str) -> &'a str {
    let start = text.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
    &text[start..start + text[start..].find('"').unwrap()]
}

/// The chart with this id, cut out of the page.
fn chart<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html.find(&format!("<figure id=\"{id}\">")).unwrap_or_else(|| panic!("no chart {id}"));
    let rest = &html[start..];
    &rest[..rest.find("</figure>").unwrap()]
}

/// The value a step series holds at `t`.
fn at(points: &[(f64, f64)], t: f64) -> f64 {
    points.iter().take_while(|p| p.0 <= t).last().map_or(0.0, |p| p.1)
}

#[test]
fn a_scenario_report_draws_usage_against_quota_pending_preemptions_and_waits() {
    let o = baton_sim::run("reclaim.yaml", SCENARIO).unwrap();
    let html = baton_sim::report::Report::of(&o).html();
    assert!(html.starts_with("<!DOCTYPE html>") && !html.contains("<script"));

    let usage = chart(&html, "gpu-usage");
    let s = series(usage);
    assert_eq!(s.keys().collect::<Vec<_>>(), ["a", "a quota", "b", "b quota"]);
    assert_eq!([at(&s["a"], 0.0), at(&s["a"], 10.0), at(&s["a"], 60.0), at(&s["a"], 160.0)], [16.0, 8.0, 16.0, 0.0]);
    assert_eq!([at(&s["b"], 10.0), at(&s["b"], 60.0)], [4.0, 0.0]);
    assert!(s["a quota"].iter().all(|p| p.1 == 8.0));
    let marks: Vec<(&str, &str)> =
        usage.split("<g class=\"preemption\" ").skip(1).map(|l| (attr(l, "data-t"), attr(l, "data-queue"))).collect();
    assert_eq!(marks, [("10", "a")]);

    let pending = series(chart(&html, "pending"));
    assert_eq!(pending.keys().collect::<Vec<_>>(), ["a", "b"]);
    // From its preemption at 10 to its new start at 60, one of a's jobs waits.
    assert_eq!([at(&pending["a"], 0.0), at(&pending["a"], 10.0), at(&pending["a"], 60.0)], [0.0, 1.0, 0.0]);

    let waits = series(chart(&html, "wait"));
    // A wait is all the time Pending: the preempted job's 50 s after its requeue count.
    assert_eq!(waits["a"], [(0.0, 0.5), (50.0, 1.0)]);
    assert_eq!(waits["b"], [(0.0, 1.0)]);
}

#[test]
fn the_report_is_written_with_one_svg_per_chart() {
    let o = baton_sim::run("reclaim.yaml", SCENARIO).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("out.html");
    let svgs = baton_sim::report::Report::of(&o).write(&page).unwrap();
    let names: Vec<String> = svgs.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["out-gpu-usage.svg", "out-pending.svg", "out-wait.svg"]);
    let svg = std::fs::read_to_string(&svgs[0]).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("data-series=\"b quota\""));
    assert!(std::fs::read_to_string(&page).unwrap().contains("<svg"));
}

/// The text of the first element that starts with `open` in `svg`.
fn text_of<'a>(svg: &'a str, open: &str) -> &'a str {
    let start = svg.find(open).unwrap_or_else(|| panic!("no {open} in {svg}"));
    let rest = &svg[start..];
    let body = &rest[rest.find('>').unwrap() + 1..];
    &body[..body.find('<').unwrap()]
}

#[test]
fn each_chart_has_a_visible_title_and_an_accessible_one() {
    let o = baton_sim::run("reclaim.yaml", SCENARIO).unwrap();
    let html = baton_sim::report::Report::of(&o).html();
    for id in ["gpu-usage", "pending", "wait"] {
        let svg = chart(&html, id);
        let svg = &svg[svg.find("<svg").unwrap()..];
        // The accessible name is the svg's first child and names the chart by its id.
        let title = text_of(svg, "<title");
        assert!(svg[svg.find('>').unwrap() + 1..].trim_start().starts_with("<title"), "{id}");
        assert!(svg.contains(&format!("aria-labelledby=\"{id}-title\"")) && svg.contains("role=\"img\""), "{id}");
        assert_eq!(attr(&svg[svg.find("<title").unwrap()..], "id"), format!("{id}-title"));
        // The same words are drawn above the plot, so a standalone SVG reads on its own.
        assert_eq!(text_of(svg, "<text class=\"chart-title\""), title, "{id}");
    }
    assert!(text_of(chart(&html, "gpu-usage"), "<text class=\"chart-title\"").starts_with("GPUs in use per queue"));
}

/// The plot's top and bottom edge: where its y axis (the axes' second line) starts and ends.
fn plot_box(svg: &str) -> (f64, f64) {
    let axes = &svg[svg.find("<g class=\"axes\"").unwrap()..];
    let y_axis = &axes[axes.find("/>").unwrap()..];
    (attr(y_axis, " y1").parse().unwrap(), attr(y_axis, " y2").parse().unwrap())
}

/// The value of attribute `name` in the first element starting with `open`, if it has one.
fn attr_in(text: &str, open: &str, name: &str) -> Option<String> {
    let el = &text[text.find(open).unwrap_or_else(|| panic!("no {open}"))..];
    let el = &el[..el.find('>').unwrap()];
    el.contains(&format!(" {name}=\"")).then(|| attr(el, &format!(" {name}")).to_string())
}

#[test]
fn each_legend_entry_shows_its_series_line_beside_its_name_above_the_plot() {
    let o = baton_sim::run("reclaim.yaml", SCENARIO).unwrap();
    let html = baton_sim::report::Report::of(&o).html();
    for id in ["gpu-usage", "pending", "wait"] {
        let svg = chart(&html, id);
        let plot_top = plot_box(svg).0;
        let entries: Vec<&str> = svg.split("<g class=\"legend-entry\" data-series=\"").skip(1).collect();
        let names: Vec<&str> = entries.iter().map(|e| e.split('"').next().unwrap()).collect();
        assert_eq!(names, series(svg).keys().collect::<Vec<_>>(), "{id}: one entry per series");
        for (name, entry) in names.iter().zip(&entries) {
            let entry = &entry[..entry.find("</g>").unwrap()];
            let line = &svg[svg.find(&format!("data-series=\"{name}\"><polyline")).unwrap()..];
            assert_eq!(attr_in(entry, "<line", "stroke"), attr_in(line, "<polyline", "stroke"), "{id} {name}");
            let dashed = |el: &str, tag: &str| attr_in(el, tag, "stroke-dasharray").is_some();
            assert_eq!(dashed(entry, "<line"), dashed(line, "<polyline"), "{id} {name}");
            assert_eq!(text_of(entry, "<text"), *name);
            let y: f64 = attr_in(entry, "<line", "y1").unwrap().parse().unwrap();
            assert!(y < plot_top, "{id} {name}: the legend sits above the plot, hiding none of it");
        }
    }
    let usage = chart(&html, "gpu-usage");
    assert!(attr_in(&usage[usage.find("data-series=\"a quota\"").unwrap()..], "<line", "stroke-dasharray").is_some());
}

/// Where along a dashed line (in one period of its pattern) its one dash is drawn:
/// (start, end, period), from `stroke-dasharray="DASH GAP"` and `stroke-dashoffset`.
fn dash_slot(polyline: &str) -> (f64, f64, f64) {
    let dash = attr_in(polyline, "<polyline", "stroke-dasharray").expect("a quota line is dashed");
    let (d, g) = dash.split_once(' ').unwrap();
    let (d, g): (f64, f64) = (d.parse().unwrap(), g.parse().unwrap());
    let offset: f64 = attr_in(polyline, "<polyline", "stroke-dashoffset").map_or(0.0, |o| o.parse().unwrap());
    let start = (-offset).rem_euclid(d + g);
    (start, start + d, d + g)
}

/// Each quota label's text and baseline.
fn quota_labels(svg: &str) -> Vec<(String, f64)> {
    let labels = svg.split("<text class=\"quota-label\"").skip(1);
    labels.map(|l| (text_of(l, "").to_string(), attr(l, " y").parse().unwrap())).collect()
}

#[test]
fn equal_quotas_interleave_their_dashes_and_share_one_label() {
    let o = baton_sim::run("reclaim.yaml", SCENARIO).unwrap();
    let html = baton_sim::report::Report::of(&o).html();
    let usage = chart(&html, "gpu-usage");
    let line = |name: &str| &usage[usage.find(&format!("data-series=\"{name}\"><polyline")).unwrap()..];
    let (a, b) = (dash_slot(line("a quota")), dash_slot(line("b quota")));
    // One pattern, each line's dash in its own part of it: every stretch of the line shows
    // a's colour, then b's, so neither hides the other.
    assert_eq!(a.2, b.2);
    let drawn = |p: (f64, f64, f64), t: f64| (t - p.0).rem_euclid(p.2) < p.1 - p.0;
    let steps = (0..(a.2 * 4.0) as usize).map(|i| i as f64 / 4.0);
    assert!(steps.clone().all(|t| !(drawn(a, t) && drawn(b, t))), "dashes overlap: {a:?} {b:?}");
    assert!(a.1 > a.0 && b.1 > b.0 && steps.clone().any(|t| drawn(a, t)) && steps.clone().any(|t| drawn(b, t)));
    let drawn_at = attr_in(line("a quota"), "<polyline", "points").unwrap();
    let y: f64 = drawn_at.split([',', ' ']).nth(1).unwrap().parse().unwrap();
    let labels = quota_labels(usage);
    assert_eq!(labels.iter().map(|l| l.0.as_str()).collect::<Vec<_>>(), ["quota a, b"]);
    assert!((y - 16.0..y).contains(&labels[0].1), "the label sits just above its line at {y}: {labels:?}");

    // The legend shows a quota's plain dash: a shared row's one dash in n would leave its
    // short sample nearly blank.
    let sample = &usage[usage.find("legend-entry\" data-series=\"b quota\"").unwrap()..];
    assert_eq!(attr_in(sample, "<line", "stroke-dasharray").as_deref(), Some("6 4"));

    // Quotas that differ keep the plain dash and a label each.
    let text = SCENARIO.replace("{name: b, quota: {gpu: 8}}", "{name: b, quota: {gpu: 4}}");
    let o = baton_sim::run("reclaim.yaml", &text).unwrap();
    let html = baton_sim::report::Report::of(&o).html();
    let usage = chart(&html, "gpu-usage");
    let mut labels: Vec<String> = quota_labels(usage).into_iter().map(|l| l.0).collect();
    labels.sort();
    assert_eq!(labels, ["quota a", "quota b"]);
    let b = &usage[usage.find("data-series=\"b quota\"><polyline").unwrap()..];
    assert_eq!(dash_slot(b), (0.0, 6.0, 10.0));
}

#[test]
fn quota_lines_are_drawn_over_every_usage_line() {
    let o = baton_sim::run("reclaim.yaml", SCENARIO).unwrap();
    let html = baton_sim::report::Report::of(&o).html();
    let usage = chart(&html, "gpu-usage");
    // Drawn later is drawn on top: a queue's usage running along another queue's quota
    // (b's at a's, say) must not hide that quota's dashes.
    let drawn: Vec<&str> =
        usage.split("<g class=\"series\" data-series=\"").skip(1).map(|p| p.split('"').next().unwrap()).collect();
    assert_eq!(drawn, ["a", "b", "a quota", "b quota"]);
}

#[test]
fn each_preemption_is_marked_over_the_usage_plot_naming_victim_and_preemptor() {
    let o = baton_sim::run("reclaim.yaml", SCENARIO).unwrap();
    // Which of a's two jobs is the victim is the scheduler's choice; the timeline says.
    let events = o.report.steps.iter().flat_map(|s| &s.events);
    let victim = events.filter(|e| e.kind == "Preempted").map(|e| e.job.clone().unwrap()).next().unwrap();
    let html = baton_sim::report::Report::of(&o).html();
    let usage = chart(&html, "gpu-usage");
    let marks: Vec<&str> = usage.split("<g class=\"preemption\" ").skip(1).collect();
    assert_eq!(marks.len(), 1);
    let m = &marks[0][..marks[0].find("</g>").unwrap()];
    let named = [attr(m, "data-t"), attr(m, "data-queue"), attr(m, "data-victim"), attr(m, "data-by")];
    assert_eq!(named, ["10", "a", victim.as_str(), "b1"]);
    // Hovering the mark (or a screen reader) says who lost GPUs to whom, and when.
    let title = format!("{victim} (queue a) preempted by b1 (queue b) at t=10 s");
    assert_eq!(text_of(m, "<title"), title);
    // A guide across the plot at t=10 (px 111.2 of 60..880 for 0..160 s), in a's colour.
    assert_eq!([attr_in(m, "<line", "x1"), attr_in(m, "<line", "x2")], [Some("111.2".into()), Some("111.2".into())]);
    let (top, bottom) = plot_box(usage);
    let y = |a: &str| attr_in(m, "<line", a).unwrap().parse::<f64>().unwrap();
    assert_eq!((y("y1"), y("y2")), (top, bottom));
    assert_eq!(attr_in(m, "<line", "stroke").as_deref(), Some("#1f77b4"));
    assert!(m.contains("<path"), "a marker at the top of the guide: {m}");
    // The legend says what the marks are; charts without preemptions have none.
    assert!(usage.contains("<g class=\"legend-entry\" data-mark=\"preemption\">"));
    for id in ["pending", "wait"] {
        assert!(!chart(&html, id).contains("preemption"), "{id}");
    }
}
