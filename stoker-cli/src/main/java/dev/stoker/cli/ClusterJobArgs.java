package dev.stoker.cli;

import dev.stoker.cluster.JobFactory;
import dev.stoker.store.ShmObjectStore;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import picocli.CommandLine;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Model.OptionSpec;

/**
 * The feed options of a cluster job as they travel to the nodes: {@code serve --cluster} sends the
 * feed and processor options its user gave, as strings; every node parses them here exactly as an
 * embedded {@code serve} would, so that all nodes make the same batches (the coordinator checks
 * their fingerprints agree).
 */
@CommandLine.Command(name = "cluster-job")
final class ClusterJobArgs {
    @Mixin ProcessorOptions processor;
    @Mixin FeedOptions feed;

    /** The options of the {@code processor} and {@code feed} mixins that {@code spec}'s user gave, with their values. */
    static List<String> of(CommandSpec spec) {
        var out = new ArrayList<String>();
        var parsed = spec.commandLine().getParseResult();
        for (String mixin : List.of("processor", "feed")) {
            for (OptionSpec o : spec.mixins().get(mixin).options()) {
                if (!parsed.hasMatchedOption(o)) continue;
                var matched = parsed.matchedOption(o.longestName());
                for (String v : matched.originalStringValues().isEmpty() ? List.of("") : matched.originalStringValues()) {
                    out.add(o.longestName());
                    if (o.arity().max() > 0) out.add(v);
                }
            }
        }
        return out;
    }

    /** What a node runs: parses the options and opens the job's task producer into the node's store. */
    static JobFactory factory() {
        return (args, store, maxWorkers) -> open(args, store, maxWorkers);
    }

    /** The options parsed as {@code serve} parses them. */
    static ClusterJobArgs parse(List<String> args) throws IOException {
        var parsed = new ClusterJobArgs();
        try {
            new CommandLine(parsed).setCaseInsensitiveEnumValuesAllowed(true).parseArgs(args.toArray(String[]::new));
        } catch (CommandLine.ParameterException e) {
            throw new IOException("the job's options do not parse on this node: " + e.getMessage());
        }
        return parsed;
    }

    /** A feed factory over these options (what an embedded {@code serve} with them would run). */
    FeedFactory feedFactory() throws IOException { return FeedFactory.open(feed, processor.toEncodeOptions()); }

    private static JobFactory.Opened open(List<String> args, ShmObjectStore store, int maxWorkers) throws IOException {
        var factory = parse(args).feedFactory();
        try {
            var opened = factory.openTasks(store, maxWorkers);
            return new JobFactory.Opened(opened.producer(), () -> {
                try {
                    opened.resources().close();
                } finally {
                    factory.close();
                }
            });
        } catch (IOException | RuntimeException e) {
            factory.close();
            throw e;
        }
    }
}
