package dev.stoker.cli;

import dev.stoker.bench.packing.PackingBench;
import dev.stoker.node.ConfigException;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * {@code stoker bench packing}: the steps that start in a data set's first epochs (one by default) planned into packed
 * steps, balanced by cost and by count, and the same samples batched padded ({@link PackingBench}); nothing is decoded:
 * the shapes come from {@code stoker validate}'s length index, or are measured from image headers first.
 */
@Command(name = "packing", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"Plan the steps that start in the first --epochs epochs (the last runs into the next epoch's head: steps run across",
                "epoch ends) into --ranks packs of at most --pack-tokens tokens (and --pack-patches patches),",
                "balanced by cost and by count; print the padding fraction, tokens per step, the imbalance (mean over steps of max / mean",
                "predicted rank cost) for each, the same samples' padding when batched padded, and the planner's µs per sample.",
                "The last stdout line is JSON {\"padding_fraction\", \"padded_padding_fraction\", \"imbalance\": {\"count\", \"cost\"},",
                "\"planner_us_per_sample\", \"samples\", \"packs\"}."})
final class PackingCommand implements Callable<Integer>, NodeOptions.Configured {
    @Spec CommandSpec spec;

    @Mixin LengthsDir lengths;

    @Option(names = "--rounds", defaultValue = "7", paramLabel = "N",
            description = "Timed plannings of the steps; the planner's cost is their median (default: ${DEFAULT-VALUE}).")
    int rounds;

    @Option(names = "--epochs", defaultValue = "1", paramLabel = "E",
            description = "Measure the steps that start in epochs 0 … E-1 (default: ${DEFAULT-VALUE}).")
    int epochs;

    @Override
    public List<ConfigKey<?>> settings() {
        return new ArrayList<>(NodeConfig.keys(NodeConfig.groups(ConfigKey.Group.PROCESSOR, ConfigKey.Group.DATA)));
    }

    @Override
    public Integer call() throws Exception {
        NodeConfig config = NodeOptions.configOrPrint(spec, settings());
        if (config == null) return 0;
        if (config.sources().isEmpty()) throw new ConfigException("--data is required: the data set's train.jsonl");
        if (!config.packed()) throw new ConfigException("--pack-tokens N is required: the tokens per pack");
        if (rounds < 1) throw new ConfigException("--rounds must be >= 1, got " + rounds);
        if (epochs < 1 || epochs > PackingBench.MAX_EPOCHS)
            throw new ConfigException("--epochs must be in [1, " + PackingBench.MAX_EPOCHS + "], got " + epochs);
        var out = spec.commandLine().getOut();
        PackingBench.run(config, lengths.resolve(config), rounds, epochs, out, out::println);
        return 0;
    }
}
