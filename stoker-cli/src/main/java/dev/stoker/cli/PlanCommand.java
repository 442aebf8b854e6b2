package dev.stoker.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.source.mix.DataSources;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.pipeline.feed.Feeder;
import dev.stoker.node.NodeFeeds;
import dev.stoker.plan.pack.PackedSchedule;
import dev.stoker.plan.pack.SampleShape;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * {@code stoker plan}: what a job will train on, in order, without decoding anything: the manifest is
 * indexed, the schedule computed, and one JSON line printed per sample of {@code --steps} global steps
 * from {@code --start-step}: {@code {"step", "rank", "source", "sample"}} ({@code source}: the source's
 * 0-based position in the order given; {@code sample}: the record's 0-based position in it).
 *
 * <p>A packed job ({@code --pack-tokens N}) prints each sample's pack: per segment of each rank's pack, in order,
 * {@code {"step", "rank", "segment", "source", "sample", "tokens", "patches", "cost"}} (the dummy image's segment:
 * source and sample −1), then per step {@code {"step", "costs", "imbalance", "tokens", "filtered"}} (per rank its pack's
 * predicted cost and tokens, the dummy's included; {@code filtered}: the records over a budget the step skipped,
 * numbered across sources). The shapes come from {@code stoker validate}'s length index when there is one for these
 * settings, else are measured from image headers first (one line on stderr says which).
 */
@Command(name = "plan", mixinStandardHelpOptions = true,
        description = {"Print what a job trains on, in order, without decoding: one JSON line {\"step\", \"rank\", \"source\", \"sample\"} per",
                "sample of --steps global steps from --start-step (the same schedule serve follows: --data, --ranks, --batch, --seed).",
                "With --pack-tokens N: each sample's pack, one line {\"step\", \"rank\", \"segment\", \"source\", \"sample\", \"tokens\", \"patches\",",
                "\"cost\"} per segment (the dummy image: sample -1) and per step {\"step\", \"costs\", \"imbalance\", \"tokens\", \"filtered\"}."})
final class PlanCommand implements Callable<Integer>, NodeOptions.Configured {
    @Spec CommandSpec spec;

    @Override
    public List<ConfigKey<?>> settings() {
        // the processor's settings too: a packed plan needs each sample's shape, which they decide
        var keys = new ArrayList<ConfigKey<?>>(NodeConfig.keys(NodeConfig.groups(ConfigKey.Group.PROCESSOR, ConfigKey.Group.DATA)));
        keys.add(NodeConfig.START_STEP);
        keys.add(NodeConfig.STEPS);
        return keys;
    }

    @Override
    public Integer call() throws Exception {
        NodeConfig config = NodeOptions.configOrPrint(spec, settings());
        if (config == null) return 0;
        long steps = config.steps(), from = config.startStep();
        if (steps <= 0) throw new ParameterException(spec.commandLine(), "--steps N (N >= 1) is needed: how many global steps to print");
        PrintWriter out = spec.commandLine().getOut();
        var json = new ObjectMapper();
        var specs = config.sources();
        if (specs.isEmpty()) throw new ParameterException(spec.commandLine(), "--data is required: the manifest (a path, file://… or s3://…)");
        try (var sources = DataSources.open(specs, config.sourceConfig(), config.indexCache())) {
            var records = sources.feedSource().records();
            if (records.size() == 0) throw new ParameterException(spec.commandLine(), "manifest " + config.data() + " holds no samples");
            if (config.packed()) {
                packed(config, sources.feedSource(), records, from, steps, out);
                return 0;
            }
            var schedule = Feeder.schedule(config.feedConfig(FeedMode.PREFETCH), records);
            var mix = schedule.mix();
            var line = new LinkedHashMap<String, Object>();
            for (long g = from; g < from + steps; g++) {
                var cursor = schedule.cursorAt(g);
                for (int r = 0; r < config.ranks(); r++)
                    for (int record : schedule.batchAt(cursor, r)) {
                        int source = mix == null ? 0 : mix.sourceOfRecord(record);
                        line.put("step", g);
                        line.put("rank", r);
                        line.put("source", source);
                        line.put("sample", mix == null ? record : record - mix.base(source));
                        out.println(json.writeValueAsString(line));
                    }
            }
        }
        out.flush();
        return 0;
    }

    @Mixin LengthsDir lengths;

    /** The packed plan: each segment of each rank's pack, then the step's costs, imbalance, tokens and filtered records. */
    private void packed(NodeConfig config, dev.stoker.source.mix.FeedSource source, dev.stoker.source.SampleRecords records, long from,
                        long steps, PrintWriter out) throws Exception {
        var err = spec.commandLine().getErr();
        dev.stoker.plan.pack.ShapeIndex shapes;
        try (var tokenizer = NodeFeeds.tokenizer(config.get(NodeConfig.TOKENIZER))) {
            shapes = NodeFeeds.shapes(config, source, records, tokenizer, lengths.resolve(config), line -> {
                err.println(line);
                err.flush();
            });
        }
        var planner = NodeFeeds.packPlanner(config, records, shapes);
        var schedule = new PackedSchedule(planner);
        var mix = planner.order().mix();
        var dummy = planner.dummy();
        var cost = planner.cost();
        var json = new ObjectMapper();
        var c = schedule.cursorAt(from);
        for (long g = from; g < from + steps; g++) {
            var step = schedule.step(c, g);
            for (int r = 0; r < step.ranks(); r++) {
                int[] pack = step.records()[r];
                int segments = pack.length + (step.dummyImage()[r] ? 1 : 0);
                for (int k = 0; k < segments; k++) {
                    var line = new LinkedHashMap<String, Object>();
                    line.put("step", g);
                    line.put("rank", r);
                    line.put("segment", k);
                    SampleShape shape;
                    if (k < pack.length) {
                        int record = pack[k];
                        int src = mix == null ? 0 : mix.sourceOfRecord(record);
                        line.put("source", src);
                        line.put("sample", mix == null ? record : record - mix.base(src));
                        shape = shapes.shape(record);
                    } else { // the dummy image's segment, as the metadata's sample_index lists it
                        line.put("source", -1);
                        line.put("sample", -1);
                        shape = dummy;
                    }
                    line.put("tokens", shape.tokens());
                    line.put("patches", shape.patches());
                    line.put("cost", cost.flops(shape));
                    out.println(json.writeValueAsString(line));
                }
            }
            var summary = new LinkedHashMap<String, Object>();
            summary.put("step", g);
            summary.put("costs", step.costs());
            summary.put("imbalance", step.imbalance());
            summary.put("tokens", step.tokens());
            summary.put("filtered", step.filtered());
            out.println(json.writeValueAsString(summary));
            c = step.next();
        }
    }
}
