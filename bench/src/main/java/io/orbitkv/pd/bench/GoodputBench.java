package io.orbitkv.pd.bench;

import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.engine.sim.SimModel;
import io.orbitkv.pd.harness.LoadClient;
import io.orbitkv.pd.harness.MixedWorkload;
import io.orbitkv.pd.harness.MixedWorkload.Point;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.PipelineSpec;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.ToDoubleFunction;

/**
 * {@code bench e2e --workload mixed}: what P/D is for. The mixed workload ({@link MixedWorkload}: Poisson arrivals, long
 * prompts) at several rates on P/D (1 prefill + 1 decode engine) and on the same two engines colocated, in one run, the
 * engines computing as the cost model says (engine.cost): TTFT, ITL, TPOT and goodput per rate and layout, the zero-load
 * references measured in the same run, the interference finding and the crossover rate; a Markdown table, JSON, and the
 * goodput-vs-rate and ITL-vs-rate plot (SVG).
 */
final class GoodputBench {

    private GoodputBench() { }

    record Options(ModelPreset preset, String cost, List<Double> rates, double seconds, int warmup, int zero, MixedWorkload.Slo slo, Path md,
                   Path json, Path svg, Map<String, String> engine) { }

    static int run(Options o) throws Exception {
        Path work = Files.createTempDirectory("orbitkv-bench-goodput-");
        Map<String, String> engine = new java.util.LinkedHashMap<>(o.engine());
        engine.putIfAbsent("engine.cost", o.cost());
        PipelineSpec spec = PipelineSpec.defaults().withModel(o.preset(), o.preset() == ModelPreset.TINY ? 4096 : 512, 0.05, 2.0)
                .withExtra(Map.of(), engine, Map.of(), Map.of()).withEngineApi(true);
        SimModel model = new SimModel(42);
        MixedWorkload.Run run;
        String machine = MachineInfo.cpuModel() + ", load average before " + MachineInfo.loadAverage();
        try (Pipeline pipeline = Pipeline.start(spec, work, s -> System.out.println("  " + s));
             LoadClient client = new LoadClient(pipeline.proxyUrl(), "orbitkv-sim-" + o.preset().key())) {
            run = MixedWorkload.run(client, MixedWorkload.Shape.DEFAULT, o.warmup(), o.zero(), o.rates(), o.seconds(), (label, done, all) -> {
                if (done == all) {
                    System.out.printf("  %-26s %d/%d%n", label, done, all);
                }
            });
        }
        int wrong = 0;
        for (MixedWorkload.Level l : run.levels()) {
            for (LoadClient.Result r : concat(l.pd(), l.colocated())) {
                if (!r.ok() || !r.text().equals(r.request().expected(model))) {
                    wrong++;
                }
            }
        }
        MixedWorkload.Summary s = MixedWorkload.Summary.of(run, o.slo());
        System.out.println();
        s.print(System.out);
        System.out.println("Answers that differ from the colocated reference or failed: " + wrong);
        String cmd = "./orbitkv-pd bench e2e --workload mixed --rates " + join(o.rates()) + " --seconds " + num(o.seconds());
        Files.createDirectories(o.md().toAbsolutePath().getParent());
        Files.writeString(o.md(), markdown(s, o, cmd, machine, wrong));
        Files.createDirectories(o.json().toAbsolutePath().getParent());
        Files.writeString(o.json(), json(s, o, wrong));
        Files.writeString(o.svg(), svg(s));
        System.out.println("Wrote " + o.md() + ", " + o.json() + " and " + o.svg());
        return wrong == 0 ? 0 : 1;
    }

    private static List<LoadClient.Result> concat(List<LoadClient.Result> a, List<LoadClient.Result> b) {
        List<LoadClient.Result> out = new ArrayList<>(a);
        out.addAll(b);
        return out;
    }

    private static String join(List<Double> v) {
        return String.join(",", v.stream().map(GoodputBench::num).toList());
    }

    private static String num(double v) {
        return v == Math.rint(v) ? Long.toString((long) v) : String.format(Locale.ROOT, "%.1f", v);
    }

    private static String f(double v) {
        return Double.isNaN(v) ? "-" : String.format(Locale.ROOT, "%.1f", v);
    }

    static String markdown(MixedWorkload.Summary s, Options o, String cmd, String machine, int wrong) {
        StringBuilder b = new StringBuilder("# Goodput: P/D against colocated on the same two engines\n\nMeasured ").append(LocalDate.now())
                .append(" by `").append(cmd).append("` on ").append(machine).append(". Engines: `engine.cost=").append(o.cost())
                .append("` (docs/engine-model.md), KV pages shaped `").append(o.preset().key()).append("`; workload: Poisson arrivals, ")
                .append(MixedWorkload.Shape.DEFAULT).append(", fixed seeds; ").append(o.seconds() == Math.rint(o.seconds()) ? num(o.seconds()) : f(o.seconds()))
                .append(" s of arrivals per rate and layout after a discarded warm-up; zero load: ").append(o.zero())
                .append(" requests one at a time. Goodput: requests/s meeting TTFT <= ").append(num(o.slo().ttftMs())).append(" ms and TPOT <= ")
                .append(num(o.slo().tpotMs())).append(" ms. Client-side times; ITL pools every gap of every streamed answer.\n\n");
        b.append("| rate (req/s) | layout | requests | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | ITL p99 / zero load | TPOT p50 | SLOs met | goodput (req/s) | handoff p50 |\n");
        b.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
        List<Point> all = new ArrayList<>(List.of(s.zeroPd(), s.zeroColocated()));
        for (int i = 0; i < s.pd().size(); i++) {
            all.add(s.pd().get(i));
            all.add(s.colocated().get(i));
        }
        for (Point p : all) {
            Point zero = p.layout().startsWith("P/D") ? s.zeroPd() : s.zeroColocated();
            b.append(String.format(Locale.ROOT, "| %s | %s | %d | %s | %s | %s | %s | %.2fx | %s | %.0f %% | %s | %s |%n", p.rate() == 0 ? "zero" : num(p.rate()),
                    p.layout(), p.requests(), f(p.ttftP50()), f(p.ttftP99()), f(p.itlP50()), f(p.itlP99()), p.itlP99() / zero.itlP99(), f(p.tpotP50()),
                    100 * p.attained(), p.rate() == 0 ? "-" : String.format(Locale.ROOT, "%.2f", p.goodput()), f(p.handoffP50())));
        }
        b.append("\n(times in ms)\n\n");
        s.findings().forEach(x -> b.append("- ").append(x).append('\n'));
        b.append("- Answers that differ from the colocated reference or failed: ").append(wrong).append("\n\n");
        b.append("![goodput and ITL p99 against the arrival rate](").append(o.svg().getFileName()).append(")\n");
        return b.toString();
    }

    static String json(MixedWorkload.Summary s, Options o, int wrong) {
        StringBuilder b = new StringBuilder("{\"date\":\"").append(LocalDate.now()).append("\",\"cost\":\"").append(o.cost()).append("\",\"preset\":\"")
                .append(o.preset().key()).append("\",\"slo_ttft_ms\":").append(o.slo().ttftMs()).append(",\"slo_tpot_ms\":").append(o.slo().tpotMs())
                .append(",\"seconds_per_rate\":").append(o.seconds()).append(",\"wrong\":").append(wrong).append(",\"crossover_rate\":")
                .append(Double.isNaN(s.crossover()) ? "null" : Double.toString(s.crossover())).append(",\"points\":[");
        List<Point> all = new ArrayList<>(List.of(s.zeroPd(), s.zeroColocated()));
        all.addAll(s.pd());
        all.addAll(s.colocated());
        for (int i = 0; i < all.size(); i++) {
            Point p = all.get(i);
            b.append(i == 0 ? "" : ",").append(String.format(Locale.ROOT, "{\"layout\":\"%s\",\"rate\":%s,\"requests\":%d,\"failed\":%d,\"ttft_p50_ms\":%s,"
                            + "\"ttft_p99_ms\":%s,\"itl_p50_ms\":%s,\"itl_p99_ms\":%s,\"tpot_p50_ms\":%s,\"attained\":%.4f,\"goodput\":%.4f,\"handoff_p50_ms\":%s}",
                    p.layout(), num(p.rate()), p.requests(), p.failed(), jn(p.ttftP50()), jn(p.ttftP99()), jn(p.itlP50()), jn(p.itlP99()), jn(p.tpotP50()),
                    p.attained(), p.goodput(), jn(p.handoffP50())));
        }
        return b.append("]}\n").toString();
    }

    private static String jn(double v) {
        return Double.isNaN(v) ? "null" : String.format(Locale.ROOT, "%.3f", v);
    }

    /** Two panels side by side: goodput against the offered rate, and ITL p99 against it (log-free, zero load dashed). */
    static String svg(MixedWorkload.Summary s) {
        int w = 920;
        int h = 360;
        StringBuilder b = new StringBuilder("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + w + "\" height=\"" + h + "\" font-family=\"sans-serif\""
                + " font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
        double maxRate = s.pd().stream().mapToDouble(Point::rate).max().orElse(1);
        panel(b, 60, 30, 360, 260, "goodput (requests/s meeting both SLOs)", s, Point::goodput, maxRate, maxRate, Double.NaN, Double.NaN);
        double maxItl = 0;
        for (Point p : concatPoints(s)) {
            maxItl = Math.max(maxItl, p.itlP99());
        }
        panel(b, 520, 30, 360, 260, "ITL p99 (ms)", s, Point::itlP99, maxRate, Math.ceil(maxItl / 10) * 10, s.zeroPd().itlP99(),
                s.zeroColocated().itlP99());
        b.append("<line x1=\"300\" y1=\"335\" x2=\"330\" y2=\"335\" stroke=\"#1f77b4\" stroke-width=\"2\"/><text x=\"335\" y=\"339\">P/D (1 prefill + 1 decode)"
                + "</text>\n<line x1=\"520\" y1=\"335\" x2=\"550\" y2=\"335\" stroke=\"#d62728\" stroke-width=\"2\"/><text x=\"555\" y=\"339\">colocated (2 engines)"
                + "</text>\n</svg>\n");
        return b.toString();
    }

    private static List<Point> concatPoints(MixedWorkload.Summary s) {
        List<Point> out = new ArrayList<>(s.pd());
        out.addAll(s.colocated());
        return out;
    }

    private static void panel(StringBuilder b, int x0, int y0, int pw, int ph, String title, MixedWorkload.Summary s, ToDoubleFunction<Point> y,
                              double maxX, double maxY, double zeroPd, double zeroCol) {
        b.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">%s</text>%n", x0, y0 - 10, title));
        b.append(String.format(Locale.ROOT, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>%n", x0, y0, pw, ph));
        for (int i = 0; i <= 4; i++) {
            double vy = maxY * i / 4;
            int py = y0 + ph - (int) Math.round(ph * i / 4.0);
            b.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>%n", x0 - 5, py + 4, num(Math.round(vy * 10) / 10.0)));
            b.append(String.format(Locale.ROOT, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#eee\"/>%n", x0, py, x0 + pw, py));
        }
        for (Point p : s.pd()) {
            int px = x0 + (int) Math.round(pw * p.rate() / maxX);
            b.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>%n", px, y0 + ph + 16, num(p.rate())));
        }
        b.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">arrival rate (requests/s)</text>%n", x0 + pw / 2, y0 + ph + 32));
        series(b, x0, y0, pw, ph, s.pd(), y, maxX, maxY, "#1f77b4");
        series(b, x0, y0, pw, ph, s.colocated(), y, maxX, maxY, "#d62728");
        for (double[] z : new double[][] {{zeroPd, 0}, {zeroCol, 1}}) {
            if (!Double.isNaN(z[0])) {
                int py = y0 + ph - (int) Math.round(ph * Math.min(1, z[0] / maxY));
                b.append(String.format(Locale.ROOT, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-dasharray=\"4 3\"/>%n", x0, py, x0 + pw, py,
                        z[1] == 0 ? "#1f77b4" : "#d62728"));
            }
        }
        if (!Double.isNaN(zeroPd)) {
            b.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\" fill=\"#555\">dashed: zero load</text>%n", x0 + 5, y0 + 14));
        }
    }

    private static void series(StringBuilder b, int x0, int y0, int pw, int ph, List<Point> pts, ToDoubleFunction<Point> y, double maxX, double maxY,
                               String color) {
        StringBuilder path = new StringBuilder();
        for (Point p : pts) {
            int px = x0 + (int) Math.round(pw * p.rate() / maxX);
            int py = y0 + ph - (int) Math.round(ph * Math.min(1, y.applyAsDouble(p) / maxY));
            path.append(path.isEmpty() ? "" : " ").append(px).append(',').append(py);
            b.append(String.format(Locale.ROOT, "<circle cx=\"%d\" cy=\"%d\" r=\"3\" fill=\"%s\"/>%n", px, py, color));
        }
        b.append(String.format(Locale.ROOT, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>%n", path, color));
    }
}
