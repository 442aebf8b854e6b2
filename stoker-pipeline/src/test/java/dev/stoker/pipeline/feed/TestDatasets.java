package dev.stoker.pipeline.feed;

import dev.stoker.testkit.Vectors;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;

/** Small LLaVA-format data sets built from the vendored conformance images. */
final class TestDatasets {
    static final String[] IMAGES = {
            "p01_photo_grace_hopper", "p03_small_40x36", "p05_gray_L_320x240", "p06_rgba_alpha_300x200",
            "p07_halfround_400x294", "p08_exact_448x448"};

    private TestDatasets() {}

    /**
     * Writes {@code n} samples to {@code dir/train.jsonl}: mostly one image, every fifth two images,
     * every seventh none, questions of varying length; the samples in {@code missing} name an image
     * that does not exist.
     */
    static Path write(Path dir, int n, Set<Integer> missing) throws IOException {
        return write(dir, n, missing, Set.of());
    }

    /**
     * As {@link #write(Path, int, Set)}; the samples in {@code truncated} name a JPEG cut after 60% of
     * its bytes, whose header reads fine, so it fails only when its pixels are decoded.
     */
    static Path write(Path dir, int n, Set<Integer> missing, Set<Integer> truncated) throws IOException {
        Path images = Files.createDirectories(dir.resolve("images"));
        byte[] whole = Files.readAllBytes(Vectors.get().inputImage(IMAGES[0]));
        Files.write(images.resolve("truncated.jpg"), java.util.Arrays.copyOf(whole, whole.length * 6 / 10));
        for (String id : IMAGES) {
            Path src = Vectors.get().inputImage(id);
            Files.copy(src, images.resolve(src.getFileName()), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        }
        var sb = new StringBuilder();
        for (int i = 0; i < n; i++) {
            String question = "What is shown here?" + " Describe it in detail.".repeat(i % 4);
            String answer = "Sample " + i + " shows " + "something ".repeat(1 + i % 5).strip() + ".";
            String image;
            String prompt;
            if (missing.contains(i)) {
                image = "\"image\": \"images/missing_" + i + ".jpg\", ";
                prompt = "<image>\\n";
            } else if (truncated.contains(i)) {
                image = "\"image\": \"images/truncated.jpg\", ";
                prompt = "<image>\\n";
            } else if (i % 7 == 3) {
                image = "";
                prompt = "";
            } else if (i % 5 == 1) {
                image = "\"image\": [\"" + ref(i) + "\", \"" + ref(i + 1) + "\"], ";
                prompt = "<image>\\n<image>\\n";
            } else {
                image = "\"image\": \"" + ref(i) + "\", ";
                prompt = "<image>\\n";
            }
            sb.append("{\"id\": \"s").append(i).append("\", ").append(image)
                    .append("\"conversations\": [{\"from\": \"human\", \"value\": \"").append(prompt).append(question)
                    .append("\"}, {\"from\": \"gpt\", \"value\": \"").append(answer).append("\"}]}\n");
        }
        return Files.writeString(dir.resolve("train.jsonl"), sb.toString());
    }

    private static String ref(int i) {
        return "images/" + Vectors.get().inputImage(IMAGES[i % IMAGES.length]).getFileName();
    }
}
