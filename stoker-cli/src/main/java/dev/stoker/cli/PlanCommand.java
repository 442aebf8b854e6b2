package dev.stoker.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import dev.stoker.pipeline.feed.DataSources;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.pipeline.feed.Feeder;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * {@code stoker plan}: what a job will train on, in order, without decoding anything: the manifest is
 * indexed, the schedule computed, and one JSON line printed per sample of {@code --steps} global steps
 * from {@code --start-step}: {@code {"step", "rank", "source", "sample"}} ({@code source}: the source's
 * 0-based position in the order given, one source today; {@code sample}: the record's 0-based position in it).
 */
@Command(name = "plan", mixinStandardHelpOptions = true,
        description = {"Print what a job trains on, in order, without decoding: one JSON line {\"step\", \"rank\", \"source\", \"sample\"} per",
                "sample of --steps global steps from --start-step (the same schedule serve follows: --data, --ranks, --batch, --seed)."})
final class PlanCommand implements Callable<Integer>, NodeOptions.Configured {
    @Spec CommandSpec spec;

    @Override
    public List<ConfigKey<?>> settings() {
        var keys = new ArrayList<ConfigKey<?>>(NodeConfig.keys(NodeConfig.groups(ConfigKey.Group.DATA)));
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
}
