//! The two plots of an evaluation, written by hand as plain SVG text: grouped bars of accuracy
//! per category (F1, judge, audited judge) and bars of tokens per question per category.
//!
//! Hand-written because the charts are two bar plots: a plotting crate (plotters and its font
//! stack) would cost far more build time than these hundred lines, and plain text output with
//! fixed number formatting is byte-for-byte deterministic.

use std::fmt::Write as _;

use super::report::TableRow;

/// One series of a grouped bar chart.
struct Series {
    name: &'static str,
    colour: &'static str,
    values: Vec<Option<f64>>,
}

const GROUP_WIDTH: f64 = 96.0;
const LEFT: f64 = 64.0;
const TOP: f64 = 40.0;
const PLOT_HEIGHT: f64 = 220.0;
const BOTTOM: f64 = 70.0;

/// Accuracy (percent) per row: F1, judge accuracy, and audited judge accuracy where present.
pub fn accuracy_chart(title: &str, rows: &[TableRow]) -> String {
    let labels: Vec<&str> = rows.iter().map(|row| row.label.as_str()).collect();
    let mut series = Vec::new();
    if rows.iter().any(|row| row.raw.f1.is_some()) {
        series.push(Series {
            name: "F1",
            colour: "#4c78a8",
            values: rows.iter().map(|row| row.raw.f1).collect(),
        });
    }
    if rows.iter().any(|row| row.raw.judge.is_some()) {
        series.push(Series {
            name: "judge",
            colour: "#f58518",
            values: rows.iter().map(|row| row.raw.judge.map(|judge| judge.mean)).collect(),
        });
    }
    if rows.iter().any(|row| row.audited.as_ref().is_some_and(|audited| audited.judge.is_some())) {
        series.push(Series {
            name: "judge (audited)",
            colour: "#54a24b",
            values: rows
                .iter()
                .map(|row| {
                    row.audited.as_ref().and_then(|audited| audited.judge).map(|judge| judge.mean)
                })
                .collect(),
        });
    }
    for one in &mut series {
        one.values = one.values.iter().map(|value| value.map(|value| value * 100.0)).collect();
    }
    bar_chart(title, "%", &labels, &series, 100.0)
}

/// Mean tokens per question per row.
pub fn tokens_chart(title: &str, rows: &[TableRow]) -> String {
    let labels: Vec<&str> = rows.iter().map(|row| row.label.as_str()).collect();
    let values: Vec<Option<f64>> = rows.iter().map(|row| Some(row.tokens_per_question)).collect();
    let top = values.iter().flatten().fold(0.0f64, |max, value| max.max(*value));
    let series = [Series { name: "tokens / question", colour: "#4c78a8", values }];
    bar_chart(title, "tokens", &labels, &series, nice_ceiling(top))
}

/// The smallest of 1, 2, 2.5, 5 × 10^k that is ≥ `value` (at least 1).
fn nice_ceiling(value: f64) -> f64 {
    if value <= 1.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|step| step * magnitude)
        .find(|candidate| *candidate >= value)
        .unwrap_or(value)
}

fn bar_chart(title: &str, unit: &str, labels: &[&str], series: &[Series], top: f64) -> String {
    let width = LEFT + GROUP_WIDTH * labels.len().max(1) as f64 + 20.0;
    let legend_height = 18.0 * series.len() as f64;
    let height = TOP + PLOT_HEIGHT + BOTTOM + legend_height;
    let baseline = TOP + PLOT_HEIGHT;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(svg, r#"<text x="{LEFT:.0}" y="20" font-size="14">{}</text>"#, escape(title));
    for tick in 0..=4 {
        let value = top * f64::from(tick) / 4.0;
        let y = baseline - PLOT_HEIGHT * f64::from(tick) / 4.0;
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT:.0}" y1="{y:.1}" x2="{:.0}" y2="{y:.1}" stroke="#dddddd"/><text x="{:.0}" y="{:.1}" text-anchor="end">{}</text>"##,
            width - 20.0,
            LEFT - 6.0,
            y + 4.0,
            format_tick(value)
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{unit}</text>"#,
        baseline - PLOT_HEIGHT / 2.0,
        baseline - PLOT_HEIGHT / 2.0
    );
    let bar_width = (GROUP_WIDTH - 16.0) / series.len().max(1) as f64;
    for (group, label) in labels.iter().enumerate() {
        let group_left = LEFT + GROUP_WIDTH * group as f64 + 8.0;
        for (index, one) in series.iter().enumerate() {
            let Some(value) = one.values.get(group).copied().flatten() else { continue };
            let bar_height = PLOT_HEIGHT * (value / top).clamp(0.0, 1.0);
            let x = group_left + bar_width * index as f64;
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{bar_height:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                baseline - bar_height,
                bar_width - 2.0,
                one.colour,
                escape(one.name),
                format_tick(value)
            );
        }
        let centre = group_left + (GROUP_WIDTH - 16.0) / 2.0;
        let _ = writeln!(
            svg,
            r#"<text x="{centre:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            baseline + 16.0,
            escape(label)
        );
    }
    let _ = writeln!(
        svg,
        r#"<line x1="{LEFT:.0}" y1="{baseline:.1}" x2="{:.0}" y2="{baseline:.1}" stroke="black"/>"#,
        width - 20.0
    );
    for (index, one) in series.iter().enumerate() {
        let y = baseline + 36.0 + 18.0 * index as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{LEFT:.0}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.0}" y="{:.1}">{}</text>"#,
            y - 10.0,
            one.colour,
            LEFT + 18.0,
            y,
            escape(one.name)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn format_tick(value: f64) -> String {
    if value.fract().abs() < 1e-9 { format!("{value:.0}") } else { format!("{value:.1}") }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(0.3), 1.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(1800.0), 2000.0);
        assert_eq!(nice_ceiling(2100.0), 2500.0);
        assert_eq!(nice_ceiling(30000.0), 50000.0);
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }
}
