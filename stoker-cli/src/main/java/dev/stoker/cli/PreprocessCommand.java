package dev.stoker.cli;

import dev.stoker.core.Npy;
import dev.stoker.image.qwenvl.ImageFeatures;
import dev.stoker.pipeline.ImagePreprocessor;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/** {@code stoker preprocess}: one image → {@code pixel_values.npy} and {@code image_grid_thw.npy}. */
@Command(name = "preprocess", mixinStandardHelpOptions = true,
        description = "Preprocess one image as the Qwen-VL image processor does.")
final class PreprocessCommand implements Callable<Integer> {
    @Mixin ProcessorOptions processor;

    @Option(names = "--image", required = true, description = "Image file.")
    Path image;

    @Option(names = "--out", required = true, description = "Output folder (created).")
    Path out;

    @Override
    public Integer call() throws IOException {
        var options = processor.toEncodeOptions();
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
