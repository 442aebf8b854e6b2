package dev.stoker.cli;

import dev.stoker.bench.flight.FlightThroughput;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** {@code stoker bench flight}: Arrow Flight throughput on loopback against a plain socket copy ({@link FlightThroughput}). */
@Command(name = "flight", mixinStandardHelpOptions = true, sortOptions = false,
        description = {"Loopback throughput of batches over Arrow Flight (DoGet) vs a plain TCP socket copy, interleaved rounds.",
                "The last stdout line is JSON {\"flight_mb_s\":{…}, \"socket_mb_s\":{…}, \"ratio\":{…}}."})
final class FlightCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Option(names = "--sizes-mb", defaultValue = "8,64", split = ",", description = "Batch sizes in MB (default: ${DEFAULT-VALUE}).")
    List<Integer> sizesMb;

    @Option(names = "--rounds", defaultValue = "5", description = "Interleaved rounds; medians are reported (default: ${DEFAULT-VALUE}).")
    int rounds;

    @Option(names = "--mb-per-round", defaultValue = "512", description = "MB moved per path and round (default: ${DEFAULT-VALUE}).")
    long mbPerRound;

    @Override
    public Integer call() throws Exception {
        FlightThroughput.run(new FlightThroughput.Settings(sizesMb, rounds, mbPerRound), spec.commandLine().getOut());
        return 0;
    }
}
