package dev.stoker.cli;

import dev.stoker.text.QwenTokenizer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/** Opens the tokenizer a command was given, or the bundled Qwen2 tokenizer. */
final class Tokenizers {
    private Tokenizers() {}

    static QwenTokenizer open(Path file) throws IOException {
        if (file == null) return QwenTokenizer.bundled();
        if (!Files.isRegularFile(file)) throw new Main.InvalidInputException(file + ": tokenizer file not found");
        return QwenTokenizer.load(file);
    }
}
