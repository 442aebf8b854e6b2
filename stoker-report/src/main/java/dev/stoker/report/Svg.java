package dev.stoker.report;

import java.util.Locale;

/** A small SVG writer: elements appended as text, every attribute value and text escaped. */
final class Svg {
    private final StringBuilder sb = new StringBuilder();
    private final int width, height;

    Svg(String plot, int width, int height, String label) {
        this.width = width;
        this.height = height;
        sb.append("<svg data-plot=\"").append(Html.esc(plot)).append("\" viewBox=\"0 0 ").append(width).append(' ').append(height)
                .append("\" width=\"").append(width).append("\" height=\"").append(height)
                .append("\" role=\"img\" aria-label=\"").append(Html.esc(label)).append("\">");
    }

    int width() { return width; }

    int height() { return height; }

    Svg rect(double x, double y, double w, double h, String fill, String title) {
        sb.append("<rect x=\"").append(f(x)).append("\" y=\"").append(f(y)).append("\" width=\"").append(f(Math.max(w, 0)))
                .append("\" height=\"").append(f(Math.max(h, 0))).append("\" fill=\"").append(Html.esc(fill)).append('"');
        if (title == null) {
            sb.append("/>");
        } else {
            sb.append("><title>").append(Html.esc(title)).append("</title></rect>");
        }
        return this;
    }

    Svg line(double x1, double y1, double x2, double y2, String stroke, double strokeWidth) {
        sb.append("<line x1=\"").append(f(x1)).append("\" y1=\"").append(f(y1)).append("\" x2=\"").append(f(x2)).append("\" y2=\"")
                .append(f(y2)).append("\" stroke=\"").append(Html.esc(stroke)).append("\" stroke-width=\"").append(f(strokeWidth)).append("\"/>");
        return this;
    }

    Svg dashed(double x1, double y1, double x2, double y2, String stroke) {
        sb.append("<line x1=\"").append(f(x1)).append("\" y1=\"").append(f(y1)).append("\" x2=\"").append(f(x2)).append("\" y2=\"")
                .append(f(y2)).append("\" stroke=\"").append(Html.esc(stroke)).append("\" stroke-dasharray=\"3 3\" stroke-width=\"1\"/>");
        return this;
    }

    Svg circle(double cx, double cy, double r, String fill, String title) {
        sb.append("<circle cx=\"").append(f(cx)).append("\" cy=\"").append(f(cy)).append("\" r=\"").append(f(r)).append("\" fill=\"")
                .append(Html.esc(fill)).append("\"><title>").append(Html.esc(title)).append("</title></circle>");
        return this;
    }

    Svg polyline(double[] xs, double[] ys, String stroke, String title) {
        sb.append("<polyline fill=\"none\" stroke=\"").append(Html.esc(stroke)).append("\" stroke-width=\"1.5\" points=\"");
        for (int i = 0; i < xs.length; i++) sb.append(f(xs[i])).append(',').append(f(ys[i])).append(' ');
        sb.append("\"><title>").append(Html.esc(title)).append("</title></polyline>");
        return this;
    }

    /** Text; anchor is start, middle or end. */
    Svg text(double x, double y, String text, String anchor, String cls) {
        sb.append("<text x=\"").append(f(x)).append("\" y=\"").append(f(y)).append("\" text-anchor=\"").append(anchor).append('"');
        if (cls != null) sb.append(" class=\"").append(cls).append('"');
        sb.append('>').append(Html.esc(text)).append("</text>");
        return this;
    }

    /** A plot whose data the run did not record: a framed note instead of a failure. */
    static String notRecorded(String plot, int width, String what) {
        var s = new Svg(plot, width, 60, what + ": not recorded in this run");
        s.sb.insert(s.sb.indexOf(">"), " data-empty=\"true\"");
        s.rect(0.5, 0.5, width - 1, 59, "#fafafa", null);
        s.text(width / 2.0, 35, what + ": not recorded in this run", "middle", "note");
        return s.end();
    }

    String end() {
        return sb.append("</svg>").toString();
    }

    static String f(double v) {
        if (!Double.isFinite(v)) return "0";
        if (v == Math.rint(v) && Math.abs(v) < 1e9) return Long.toString((long) v);
        return String.format(Locale.ROOT, "%.2f", v);
    }
}
