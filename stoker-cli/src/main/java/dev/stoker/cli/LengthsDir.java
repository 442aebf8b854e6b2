package dev.stoker.cli;

import dev.stoker.node.NodeConfig;
import java.nio.file.Path;
import picocli.CommandLine.Option;

/**
 * {@code --lengths-dir}, declared once for the commands that write or read the length index: {@code validate} writes it,
 * {@code plan} and {@code bench packing} read it for a packed job. Without it they use the folder {@code serve} reads
 * the index from ({@link NodeConfig#lengthsDir()}: the index cache's), so that the four agree by default.
 */
final class LengthsDir {
    @Option(names = "--lengths-dir", paramLabel = "DIR",
            description = "Where stoker validate writes the length index and packed plans read it (default: the index cache, "
                    + "$STOKER_INDEX_CACHE or ~/.cache/stoker/index, where serve reads it).")
    Path dir;

    /** The folder given, else {@code config}'s. */
    Path resolve(NodeConfig config) { return dir != null ? dir : config.lengthsDir(); }
}
