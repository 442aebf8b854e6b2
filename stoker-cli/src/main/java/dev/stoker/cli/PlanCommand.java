package dev.stoker.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.source.mix.DataSources;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.Iterator;
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
 * <p>Both come from the job's one {@link dev.stoker.plan.schedule.StepSchedule}, which says how a rank's share of a step
 * is printed. A packed job ({@code --pack-tokens N}) prints each sample's pack: per segment of each rank's pack, in order,
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

    /** It prints what serve would feed: an audio family's job within serve's limits ({@code NodeConfig.audioFeedRefusal}), packed or not. */
    @Override
    public boolean feedsAudio() { return true; }

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
        var err = spec.commandLine().getErr();
        try (var sources = DataSources.open(specs, config.sourceConfig(), config.indexCache())) {
            var source = sources.feedSource();
            var records = source.records();
            if (records.size() == 0) throw new ParameterException(spec.commandLine(), "manifest " + config.data() + " holds no samples");
            var plan = NodeFeeds.schedule(config, source, records, lengths.resolve(config), line -> {
                err.println(line);
                err.flush();
            });
            var at = plan.cursorAt(from);
            var schedule = plan.labelled(at, from);
            var ranks = new ArrayList<Iterator<ScheduledBatch>>(config.ranks());
            for (int r = 0; r < config.ranks(); r++) ranks.add(schedule.iterator(at, r));
            for (long g = from; g < from + steps; g++) {
                ScheduledBatch last = null;
                for (var rank : ranks) {
                    last = rank.next();
                    for (var line : schedule.describe(last)) out.println(json.writeValueAsString(line));
                }
                for (var line : schedule.describeStep(last)) out.println(json.writeValueAsString(line));
            }
        }
        out.flush();
        return 0;
    }

    @Mixin LengthsDir lengths;
}
