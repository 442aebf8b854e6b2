package dev.stoker.testkit;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.awt.image.BufferedImage;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import javax.imageio.ImageIO;

/**
 * A LLaVA-format data set of many small JPEGs, quick to write (for {@code stoker validate}'s throughput and for tests
 * that need many records): {@code n} samples in {@code train.jsonl}, each image its own file under {@code images/}
 * (the bytes of one of {@link #DISTINCT} generated JPEGs of 64 to 639 pixels a side), 8% of samples without an
 * image, 10% with two, 10% with two turns. Deterministic for a seed.
 *
 * <p>{@code java -cp 'stoker-cli/target/stoker-cli.jar:stoker-cli/target/lib/*' dev.stoker.testkit.SmallJpegDataset DIR N [SEED]}
 */
public final class SmallJpegDataset {
    /** How many different JPEGs the files are copies of. */
    public static final int DISTINCT = 48;

    private SmallJpegDataset() {}

    public static void main(String[] args) throws IOException {
        if (args.length < 2) {
            System.err.println("usage: SmallJpegDataset DIR N [SEED]");
            System.exit(2);
        }
        Path manifest = write(Path.of(args[0]), Integer.parseInt(args[1]), args.length > 2 ? Long.parseLong(args[2]) : 1);
        System.out.println(manifest);
    }

    /** Writes the data set into {@code dir}; returns {@code dir/train.jsonl}. */
    public static Path write(Path dir, int n, long seed) throws IOException {
        Path images = Files.createDirectories(dir.resolve("images"));
        var rng = new SplittableRandom(seed);
        List<byte[]> jpegs = new ArrayList<>();
        for (int k = 0; k < DISTINCT; k++) jpegs.add(jpeg(64 + rng.nextInt(576), 64 + rng.nextInt(576), rng.nextLong()));
        var json = new ObjectMapper();
        var lines = new StringBuilder();
        for (int i = 0; i < n; i++) {
            double r = rng.nextDouble();
            int count = r < 0.08 ? 0 : r < 0.18 ? 2 : 1;
            ObjectNode sample = json.createObjectNode().put("id", "s" + i);
            var refs = new ArrayList<String>();
            for (int k = 0; k < count; k++) {
                String ref = String.format("images/%07d_%d.jpg", i, k);
                Files.write(dir.resolve(ref), jpegs.get(rng.nextInt(DISTINCT)));
                refs.add(ref);
            }
            if (count == 1) sample.put("image", refs.getFirst());
            else if (count == 2) sample.putArray("image").add(refs.get(0)).add(refs.get(1));
            ArrayNode turns = sample.putArray("conversations");
            String prompt = "<image>\n".repeat(count);
            turns.addObject().put("from", "human").put("value", prompt + "What is in picture " + i + "?" + " Be precise.".repeat(rng.nextInt(4)));
            turns.addObject().put("from", "gpt").put("value", "Picture " + i + " shows " + "a thing ".repeat(1 + rng.nextInt(12)).strip() + ".");
            if (rng.nextDouble() < 0.10) {
                turns.addObject().put("from", "human").put("value", "And its colour?");
                turns.addObject().put("from", "gpt").put("value", "Mostly grey.");
            }
            lines.append(json.writeValueAsString(sample)).append('\n');
        }
        return Files.writeString(dir.resolve("train.jsonl"), lines);
    }

    /** A {@code width}×{@code height} baseline JPEG of smooth noise. */
    public static byte[] jpeg(int width, int height, long seed) {
        var img = new BufferedImage(width, height, BufferedImage.TYPE_3BYTE_BGR);
        var rng = new SplittableRandom(seed);
        int base = rng.nextInt(0xFFFFFF);
        for (int y = 0; y < height; y++)
            for (int x = 0; x < width; x++) img.setRGB(x, y, base + (x * 3 + y * 5 + rng.nextInt(16)) & 0xFFFFFF);
        try {
            var out = new ByteArrayOutputStream();
            if (!ImageIO.write(img, "jpeg", out)) throw new IOException("no JPEG writer");
            return out.toByteArray();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
