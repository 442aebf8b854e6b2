package dev.stoker.cli;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

/** {@code stoker bench flight}: Arrow Flight throughput on loopback against a plain socket copy of the same bytes. */
@Command(name = "flight", mixinStandardHelpOptions = true,
        description = {"Loopback throughput of batches over Arrow Flight (DoGet) vs a plain TCP socket copy, interleaved rounds.",
                "The last stdout line is JSON {\"flight_mb_s\":{…}, \"socket_mb_s\":{…}, \"ratio\":{…}}."})
final class FlightBench implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Option(names = "--sizes-mb", defaultValue = "8,64", description = "Batch sizes in MB (default: ${DEFAULT-VALUE}).")
    String sizesMb;

    @Option(names = "--rounds", defaultValue = "5", description = "Interleaved rounds; medians are reported (default: ${DEFAULT-VALUE}).")
    int rounds;

    @Option(names = "--mb-per-round", defaultValue = "512", description = "MB moved per path and round (default: ${DEFAULT-VALUE}).")
    long mbPerRound;

    @Override
    public Integer call() throws Exception {
        var args = new ArrayList<>(List.of("--sizes-mb", sizesMb, "--rounds", Integer.toString(rounds), "--mb-per-round", Long.toString(mbPerRound)));
        spec.commandLine().getOut().flush();
        dev.stoker.flight.bench.FlightThroughput.run(args.toArray(String[]::new)); // prints its table and JSON to stdout
        System.out.flush();
        return 0;
    }
}
