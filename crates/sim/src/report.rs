//! `baton sim --report out.html`: a self-contained HTML page with inline SVG charts (no
//! script), and the same charts as SVG files beside it, so that two policy files can be
//! compared by looking at them:
//! - GPUs in use per queue over time, each against its quota (dashed), preemptions marked
//!   on the timeline;
//! - pending jobs per queue over time;
//! - the distribution of first-start waits per queue (the share of jobs that waited at most
//!   x seconds).
//!
//! Each series is a `<g class="series" data-series="NAME">` whose polyline carries its
//! values in data units in `data-points` ("x,y x,y", seconds and GPUs or jobs), so that a
//! reader or a test can check what is drawn.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use crate::Outcome;
use crate::stats::Collector;

/// Points drawn per series; longer series are thinned evenly (the last point is kept).
pub const MAX_POINTS_PER_SERIES: usize = 2_000;
/// Queues drawn in one chart (each gets a series); more are left out, and the page says so.
pub const MAX_SERIES: usize = 24;

const WIDTH: f64 = 900.0;
const PLOT_HEIGHT: f64 = 250.0;
const MARGIN: (f64, f64, f64) = (60.0, 20.0, 40.0); // left, right, bottom
/// The legend's rows start below the title; the plot starts below the legend.
const LEGEND_TOP: f64 = 30.0;
const LEGEND_ROW: f64 = 16.0;
const LEGEND_GAP: f64 = 14.0;
/// A legend entry's line sample, and a rough width of one label character at font-size 11
/// (the legend wraps by it; there is no text measuring without a renderer).
const SAMPLE: f64 = 28.0;
const CHAR_WIDTH: f64 = 6.5;
/// The legend's words for preemption marks.
const MARK_LABEL: &str = "preemption (in the victim queue's colour)";
/// A quota line's dash and gap; lines closer than `SAME_ROW` pixels read as one line.
const DASH: f64 = 6.0;
const GAP: f64 = 4.0;
const SAME_ROW: f64 = 2.0;
const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    /// The queue it belongs to (a quota line's label names it).
    pub queue: String,
    pub points: Vec<(f64, f64)>,
    /// A quota line rather than a measured one.
    pub dashed: bool,
    /// Drawn as steps (the value holds until the next point).
    pub steps: bool,
    pub color: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// File-name part and HTML id.
    pub id: &'static str,
    pub title: String,
    pub x_label: &'static str,
    pub y_label: &'static str,
    pub series: Vec<Series>,
    /// Preemptions, marked across the plot at their instant.
    pub marks: Vec<Mark>,
}

/// A preemption as a chart marks it.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// Seconds.
    pub t: f64,
    pub victim: String,
    /// The victim's queue and its series colour.
    pub queue: String,
    pub color: usize,
    pub by: String,
    /// The preemptor's queue, if the preemptor is still known.
    pub by_queue: Option<String>,
}

impl Mark {
    /// What a reader hovering the mark (or a screen reader) is told.
    fn title(&self) -> String {
        let by_queue = self.by_queue.as_ref().map(|q| format!(" (queue {q})")).unwrap_or_default();
        format!("{} (queue {}) preempted by {}{by_queue} at t={} s", self.victim, self.queue, self.by, num(self.t))
    }
}

/// The charts of one run.
#[derive(Debug, Clone)]
pub struct Report {
    pub name: String,
    pub charts: Vec<Chart>,
    pub left_out_queues: usize,
}

impl Report {
    pub fn of(o: &Outcome) -> Report {
        let c = &o.stats;
        let shown = c.queues.len().min(MAX_SERIES);
        let charts = vec![usage_chart(c, &o.quota_gpus, shown), pending_chart(c, shown), wait_chart(c, o, shown)];
        Report { name: o.report.name.clone(), charts, left_out_queues: c.queues.len() - shown }
    }

    /// The HTML page with every chart inline.
    pub fn html(&self) -> String {
        let mut out = String::new();
        let title = esc(&format!("baton sim report: {}", self.name));
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\n\
             <style>body{{font-family:sans-serif;margin:2em;color:#222}}figure{{margin:1.5em 0}}</style>\
             </head><body>\n<h1>{title}</h1>\n"
        );
        if self.left_out_queues > 0 {
            let _ = writeln!(out, "<p>{} queues past the first {MAX_SERIES} are not drawn.</p>", self.left_out_queues);
        }
        // Each SVG draws its own title, so a figure needs no caption to repeat it.
        for c in &self.charts {
            let _ = writeln!(out, "<figure id=\"{}\">\n{}</figure>", c.id, svg(c));
        }
        out.push_str("</body></html>\n");
        out
    }

    /// Writes the page at `path` and each chart as `<stem>-<chart>.svg` beside it; returns the
    /// SVG paths.
    pub fn write(&self, path: &Path) -> std::io::Result<Vec<PathBuf>> {
        std::fs::write(path, self.html())?;
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "report".into());
        let mut written = Vec::new();
        for c in &self.charts {
            let p = path.with_file_name(format!("{stem}-{}.svg", c.id));
            let doc = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{}", svg(c));
            std::fs::write(&p, doc)?;
            written.push(p);
        }
        Ok(written)
    }
}

fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

fn usage_chart(c: &Collector, quota: &[u64], shown: usize) -> Chart {
    let mut series = Vec::new();
    let end = c.samples.last().map_or(0.0, |s| secs(s.at_ms));
    let start = c.samples.first().map_or(0.0, |s| secs(s.at_ms));
    for q in 0..shown {
        let points = c.samples.iter().map(|s| (secs(s.at_ms), s.used_gpus[q] as f64)).collect();
        let queue = c.queues[q].to_string();
        series.push(Series { name: queue.clone(), queue: queue.clone(), points, dashed: false, steps: true, color: q });
        if let Some(&nominal) = quota.get(q).filter(|&&n| n > 0) {
            let points = vec![(start, nominal as f64), (end, nominal as f64)];
            let name = format!("{queue} quota");
            series.push(Series { name, queue, points, dashed: true, steps: false, color: q });
        }
    }
    let name = |q: usize| c.queues[q].to_string();
    let marks = (c.preempted.iter().filter(|p| p.queue < shown))
        .map(|p| Mark {
            t: secs(p.at_ms),
            victim: p.victim.to_string(),
            queue: name(p.queue),
            color: p.queue,
            by: p.by.to_string(),
            by_queue: p.by_queue.map(name),
        })
        .collect();
    Chart {
        id: "gpu-usage",
        title: "GPUs in use per queue, against quota, with preemptions".into(),
        x_label: "time (s)",
        y_label: "GPUs",
        series,
        marks,
    }
}

fn pending_chart(c: &Collector, shown: usize) -> Chart {
    let series = (0..shown)
        .map(|q| Series {
            name: c.queues[q].to_string(),
            queue: c.queues[q].to_string(),
            points: c.samples.iter().map(|s| (secs(s.at_ms), s.pending[q] as f64)).collect(),
            dashed: false,
            steps: true,
            color: q,
        })
        .collect();
    Chart {
        id: "pending",
        title: "Pending jobs per queue".into(),
        x_label: "time (s)",
        y_label: "jobs",
        series,
        marks: Vec::new(),
    }
}

/// Share of a queue's jobs that waited at most x seconds, all their time Pending (a wait
/// still going on counts up to the end of the run).
fn wait_chart(c: &Collector, o: &Outcome, shown: usize) -> Chart {
    let end = o.report.summary.end.0;
    let mut waits: Vec<Vec<u64>> = vec![Vec::new(); shown];
    for j in c.jobs.values().filter(|j| j.queue < shown) {
        waits[j.queue].push(j.wait_ms(end));
    }
    let series = waits
        .into_iter()
        .enumerate()
        .filter(|(_, w)| !w.is_empty())
        .map(|(q, mut w)| {
            w.sort_unstable();
            let n = w.len() as f64;
            let points = w.iter().enumerate().map(|(i, &ms)| (secs(ms), (i + 1) as f64 / n)).collect();
            let queue = c.queues[q].to_string();
            Series { name: queue.clone(), queue, points, dashed: false, steps: true, color: q }
        })
        .collect();
    Chart {
        id: "wait",
        title: "Wait (all time Pending): share of each queue's jobs that waited at most x".into(),
        x_label: "wait (s)",
        y_label: "share of jobs",
        series,
        marks: Vec::new(),
    }
}

/// At most `MAX_POINTS_PER_SERIES` points, evenly spread, first and last kept.
fn thin(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS_PER_SERIES {
        return points.to_vec();
    }
    let step = points.len().div_ceil(MAX_POINTS_PER_SERIES - 1);
    let mut out: Vec<(f64, f64)> = points.iter().step_by(step).copied().collect();
    if out.last() != points.last() {
        out.push(*points.last().expect("not empty"));
    }
    out
}

/// Where a chart's data lands: its data ranges and the plot's top edge (what sits above the
/// plot decides how far down it starts).
struct Frame {
    x_min: f64,
    x_max: f64,
    y_max: f64,
    top: f64,
}

impl Frame {
    fn of(c: &Chart, thinned: &[Vec<(f64, f64)>], top: f64) -> Frame {
        let all = thinned.iter().flatten();
        let x_max = all.clone().map(|p| p.0).fold(0.0, f64::max).max(c.marks.iter().map(|m| m.t).fold(0.0, f64::max));
        let x_min = all.clone().map(|p| p.0).fold(f64::INFINITY, f64::min).min(x_max);
        let y_max = all.map(|p| p.1).fold(0.0, f64::max).max(1.0);
        // A run of one instant still gets a second of width, so nothing divides by zero.
        let x_max = if x_max > x_min { x_max } else { x_min + 1.0 };
        Frame { x_min, x_max, y_max, top }
    }

    fn bottom(&self) -> f64 {
        self.top + PLOT_HEIGHT
    }

    fn height(&self) -> f64 {
        self.bottom() + MARGIN.2
    }

    fn px(&self, x: f64) -> f64 {
        MARGIN.0 + (x - self.x_min) / (self.x_max - self.x_min) * (WIDTH - MARGIN.0 - MARGIN.1)
    }

    fn py(&self, y: f64) -> f64 {
        self.bottom() - y / self.y_max * PLOT_HEIGHT
    }
}

/// How a series' line is drawn; its legend sample is drawn alike, so that the two can be
/// matched by eye.
struct Stroke {
    color: &'static str,
    dashed: bool,
    /// This line's turn `k` of `n` quota lines on one pixel row.
    turn: (usize, usize),
}

impl Stroke {
    /// The stroke attributes of the line, or of its legend `sample`. Lines on one row of n
    /// draw one dash in n, each at its own place, so that along the row the queues' colours
    /// take turns and every one shows; a sample shows the plain dash, since one dash in n
    /// would leave its few pixels nearly blank.
    fn attrs(&self, sample: bool) -> String {
        let mut out = format!("stroke=\"{}\" stroke-width=\"1.5\"", self.color);
        match (self.dashed, self.turn) {
            (false, _) => {}
            (true, (k, n)) if n > 1 && !sample => {
                let _ = write!(out, " stroke-dasharray=\"{} {}\"", num(DASH), num(DASH * (n - 1) as f64));
                if k > 0 {
                    let _ = write!(out, " stroke-dashoffset=\"{}\"", num(DASH * k as f64));
                }
            }
            (true, _) => {
                let _ = write!(out, " stroke-dasharray=\"{} {}\"", num(DASH), num(GAP));
            }
        }
        out
    }
}

/// The strokes of a chart's series, given its quota lines' rows.
fn strokes(c: &Chart, rows: &[Vec<usize>]) -> Vec<Stroke> {
    let mut out: Vec<Stroke> = c
        .series
        .iter()
        .map(|s| Stroke { color: COLORS[s.color % COLORS.len()], dashed: s.dashed, turn: (0, 1) })
        .collect();
    for row in rows {
        for (k, &i) in row.iter().enumerate() {
            out[i].turn = (k, row.len());
        }
    }
    out
}

/// The quota (dashed, level) lines grouped by the pixel row they land on, top row first,
/// each row's series in chart order.
fn quota_rows(c: &Chart, f: &Frame) -> Vec<Vec<usize>> {
    let mut level: Vec<(f64, usize)> = (c.series.iter().enumerate())
        .filter(|(_, s)| s.dashed)
        .filter_map(|(i, s)| Some((f.py(s.points.first()?.1), i)))
        .collect();
    level.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut rows: Vec<(f64, Vec<usize>)> = Vec::new();
    for (y, i) in level {
        match rows.last_mut() {
            Some((top, row)) if y - *top < SAME_ROW => row.push(i),
            _ => rows.push((y, vec![i])),
        }
    }
    rows.into_iter().map(|(_, mut row)| (row.sort_unstable(), row).1).collect()
}

/// Each preemption: a faint guide across the plot at its instant, in the victim queue's
/// colour (so it lines up with that queue's drop), and a marker just above the plot, where
/// it covers no data and is big enough to hover for its title.
fn preemption_marks(out: &mut String, marks: &[Mark], f: &Frame) {
    if marks.is_empty() {
        return;
    }
    out.push_str("<g class=\"preemptions\">\n");
    for m in marks {
        let (x, color) = (f.px(m.t), COLORS[m.color % COLORS.len()]);
        let _ = writeln!(
            out,
            "<g class=\"preemption\" data-t=\"{}\" data-queue=\"{}\" data-victim=\"{}\" data-by=\"{}\"><title>{}</title>\
             <line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{}\" y2=\"{}\" stroke=\"{color}\" stroke-width=\"1\" stroke-dasharray=\"2 3\"/>\
             <path d=\"{}\" fill=\"{color}\"/></g>",
            num(m.t),
            esc(&m.queue),
            esc(&m.victim),
            esc(&m.by),
            esc(&m.title()),
            f.top,
            f.bottom(),
            marker(x, f.top - 8.0),
        );
    }
    out.push_str("</g>\n");
}

/// A small triangle pointing down at `x`, its base on `y`.
fn marker(x: f64, y: f64) -> String {
    format!("M{:.1},{y:.1} L{:.1},{y:.1} L{x:.1},{:.1} Z", x - 4.5, x + 4.5, y + 7.0)
}

/// One label per quota row at the plot's right end, naming its queues ("quota a, b"): the
/// legend cannot say which queues share a line. Labels are stacked from the bottom up so
/// that close rows' labels do not overprint each other.
fn quota_labels(out: &mut String, c: &Chart, rows: &[Vec<usize>], f: &Frame) {
    let mut above = f64::INFINITY;
    for row in rows.iter().rev() {
        let y = f.py(c.series[row[0]].points[0].1);
        above = (y - 4.0).min(above - 12.0);
        let queues: Vec<&str> = row.iter().map(|&i| c.series[i].queue.as_str()).collect();
        let _ = writeln!(
            out,
            "<text class=\"quota-label\" x=\"{:.1}\" y=\"{above:.1}\" text-anchor=\"end\" font-size=\"10\" fill=\"#444\" \
             stroke=\"#fff\" stroke-width=\"3\" paint-order=\"stroke\">quota {}</text>",
            WIDTH - MARGIN.1 - 2.0,
            esc(&queues.join(", "))
        );
    }
}

/// One chart as an SVG document (no XML declaration, so it can go inline).
pub fn svg(c: &Chart) -> String {
    let thinned: Vec<Vec<(f64, f64)>> = c.series.iter().map(|s| thin(&s.points)).collect();
    let mut labels: Vec<&str> = c.series.iter().map(|s| s.name.as_str()).collect();
    if !c.marks.is_empty() {
        labels.push(MARK_LABEL);
    }
    let places = legend_places(&labels);
    let rows = places.last().map_or(0, |p| p.1 + 1);
    let f = Frame::of(c, &thinned, LEGEND_TOP + rows as f64 * LEGEND_ROW + LEGEND_GAP);
    let quotas = quota_rows(c, &f);
    let strokes = strokes(c, &quotas);
    let mut out = String::new();
    heading(&mut out, c, &f);
    axes(&mut out, c, &f);
    legend(&mut out, &labels, &strokes, &places);
    // Quota lines last, on top: a queue's usage may run along another queue's quota, and
    // would hide it.
    let lines = c.series.iter().zip(&thinned).zip(&strokes);
    for ((s, pts), stroke) in lines.clone().filter(|l| !l.0.0.dashed).chain(lines.filter(|l| l.0.0.dashed)) {
        series_line(&mut out, s, pts, stroke, &f);
    }
    quota_labels(&mut out, c, &quotas, &f);
    preemption_marks(&mut out, &c.marks, &f);
    out.push_str("</svg>\n");
    out
}

fn series_line(out: &mut String, s: &Series, pts: &[(f64, f64)], stroke: &Stroke, f: &Frame) {
    let data: Vec<String> = pts.iter().map(|(x, y)| format!("{},{}", num(*x), num(*y))).collect();
    let mut drawn = Vec::new();
    for (k, &(x, y)) in pts.iter().enumerate() {
        if s.steps && k > 0 {
            drawn.push(format!("{:.1},{:.1}", f.px(x), f.py(pts[k - 1].1)));
        }
        drawn.push(format!("{:.1},{:.1}", f.px(x), f.py(y)));
    }
    let _ = writeln!(
        out,
        "<g class=\"series\" data-series=\"{}\"><polyline fill=\"none\" {} points=\"{}\" data-points=\"{}\"/></g>",
        esc(&s.name),
        stroke.attrs(false),
        drawn.join(" "),
        data.join(" "),
    );
}

/// Each legend entry's left edge and row: entries run left to right above the plot (where
/// they hide no data) and wrap at the plot's width, so many queues take more rows.
fn legend_places(labels: &[&str]) -> Vec<(f64, usize)> {
    let (mut x, mut row) = (MARGIN.0, 0);
    let mut places = Vec::with_capacity(labels.len());
    for l in labels {
        let w = SAMPLE + 6.0 + l.chars().count() as f64 * CHAR_WIDTH + 18.0;
        if x > MARGIN.0 && x + w > WIDTH - MARGIN.1 {
            (x, row) = (MARGIN.0, row + 1);
        }
        places.push((x, row));
        x += w;
    }
    places
}

/// The legend entry for preemption marks (after the series' entries).
fn mark_entry(out: &mut String, x: f64, row: usize) {
    let y = LEGEND_TOP + row as f64 * LEGEND_ROW + LEGEND_ROW / 2.0;
    let _ = writeln!(
        out,
        "<g class=\"legend-entry\" data-mark=\"preemption\"><path d=\"{}\" fill=\"#666\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\">{MARK_LABEL}</text></g>",
        marker(x + SAMPLE / 2.0, y - 3.5),
        x + SAMPLE + 6.0,
        y + 4.0,
    );
}

/// Each entry: a short line drawn as its series is (colour and dashes), then its name; a
/// label past the series' is the preemption marks' entry.
fn legend(out: &mut String, labels: &[&str], strokes: &[Stroke], places: &[(f64, usize)]) {
    out.push_str("<g class=\"legend\" font-size=\"11\" fill=\"#222\">\n");
    for ((label, stroke), &(x, row)) in labels.iter().zip(strokes).zip(places) {
        let y = LEGEND_TOP + row as f64 * LEGEND_ROW + LEGEND_ROW / 2.0;
        let _ = writeln!(
            out,
            "<g class=\"legend-entry\" data-series=\"{name}\"><line x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" {}/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{name}</text></g>",
            x + SAMPLE,
            stroke.attrs(true),
            x + SAMPLE + 6.0,
            y + 4.0,
            name = esc(label),
        );
    }
    if let Some(&(x, row)) = places.get(strokes.len()) {
        mark_entry(out, x, row);
    }
    out.push_str("</g>\n");
}

/// The `<svg>` element and the chart's title twice: as `<title>`, the accessible name a
/// screen reader announces, and as drawn text, since a viewer shows no `<title>` and the SVG
/// files beside the page have no caption of their own.
fn heading(out: &mut String, c: &Chart, f: &Frame) {
    let (id, title, h) = (c.id, esc(&c.title), f.height());
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{h}\" viewBox=\"0 0 {WIDTH} {h}\" \
         font-family=\"sans-serif\" role=\"img\" aria-labelledby=\"{id}-title\" data-chart=\"{id}\">\n\
         <title id=\"{id}-title\">{title}</title>\n\
         <text class=\"chart-title\" x=\"{}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{title}</text>\n",
        MARGIN.0
    );
}

fn axes(out: &mut String, c: &Chart, f: &Frame) {
    let (l, r, _) = MARGIN;
    let (top, bottom, h) = (f.top, f.bottom(), f.height());
    let _ = writeln!(
        out,
        "<g class=\"axes\" font-size=\"11\"><line x1=\"{l}\" y1=\"{bottom}\" x2=\"{}\" y2=\"{bottom}\" stroke=\"#444\"/>\
         <line x1=\"{l}\" y1=\"{top}\" x2=\"{l}\" y2=\"{bottom}\" stroke=\"#444\"/>\
         <text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
         <text x=\"12\" y=\"{mid:.1}\" transform=\"rotate(-90 12 {mid:.1})\" text-anchor=\"middle\">{}</text>",
        WIDTH - r,
        (l + WIDTH - r) / 2.0,
        h - 5.0,
        c.x_label,
        c.y_label,
        mid = (top + bottom) / 2.0,
    );
    for i in 0..=4 {
        let x = f.x_min + (f.x_max - f.x_min) * f64::from(i) / 4.0;
        let y = f.y_max * f64::from(i) / 4.0;
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            f.px(x),
            bottom + 20.0,
            num(x),
            l - 4.0,
            f.py(y) + 4.0,
            num(y)
        );
    }
    out.push_str("</g>\n");
}

/// A number as short as it reads: whole numbers bare, others to 3 decimals.
fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{}", v as i64) } else { format!("{v:.3}") }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
