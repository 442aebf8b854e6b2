package dev.stoker.cli;

import java.io.PrintWriter;
import java.io.StringWriter;

/** Runs the CLI in-process and keeps what it printed. */
record CliRunner(int status, String out, String err) {
    static CliRunner run(String... args) {
        var out = new StringWriter();
        var err = new StringWriter();
        int status = Main.run(args, new PrintWriter(out, true), new PrintWriter(err, true));
        return new CliRunner(status, out.toString(), err.toString());
    }

    String lastStdoutLine() {
        var lines = out.strip().split("\n");
        return lines[lines.length - 1];
    }
}
