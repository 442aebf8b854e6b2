package dev.stoker.cli;

import dev.stoker.core.Npy;
import dev.stoker.encode.ImagePreprocessor;
import dev.stoker.image.qwenvl.ImageFeatures;
import dev.stoker.node.ConfigKey;
import dev.stoker.node.NodeConfig;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/** {@code stoker preprocess}: one image → {@code pixel_values.npy} and {@code image_grid_thw.npy}. */
@Command(name = "preprocess", mixinStandardHelpOptions = true,
        description = "Preprocess one image as the Qwen-VL image processor does.")
final class PreprocessCommand implements Callable<Integer>, NodeOptions.Configured {
    /** What decides how an image becomes pixel_values. */
    static final List<ConfigKey<?>> IMAGE_SETTINGS = List.of(NodeConfig.MODEL, NodeConfig.OVERRIDE_MODEL, NodeConfig.PROCESSOR_KEY,
            NodeConfig.MIN_PIXELS, NodeConfig.MAX_PIXELS, NodeConfig.EXIF, NodeConfig.IMAGE_BACKEND, NodeConfig.DECODE_SCALE,
            NodeConfig.MAX_SOURCE_PIXELS);

    @Spec CommandSpec spec;

    @Option(names = "--image", required = true, description = "Image file.")
    Path image;

    @Option(names = "--out", required = true, description = "Output folder (created).")
    Path out;

    @Override
    public List<ConfigKey<?>> settings() { return IMAGE_SETTINGS; }

    @Override
    public boolean configFile() { return false; }

    @Override
    public Integer call() throws IOException {
        var options = NodeOptions.config(spec, settings()).encodeOptions();
        byte[] bytes = readInput(image);
        ImageFeatures f = new ImagePreprocessor(options).process(bytes, image.toString());
        Files.createDirectories(out);
        Npy.writeFloat32(out.resolve("pixel_values.npy"), f.pixelValues(), f.rows(), f.rowLength());
        Npy.writeInt64(out.resolve("image_grid_thw.npy"), f.gridThw(), 1, 3);
        return 0;
    }

    static byte[] readInput(Path file) {
        try {
            return Files.readAllBytes(file);
        } catch (NoSuchFileException e) {
            throw new Main.InvalidInputException(file + ": no such file");
        } catch (IOException e) {
            throw new Main.InvalidInputException(file + ": cannot read: " + e.getMessage());
        }
    }
}
