package dev.stoker.node;

import static dev.stoker.node.NodeSettings.CHAT_TEMPLATE;
import static dev.stoker.node.NodeSettings.MAX_PIXELS;
import static dev.stoker.node.NodeSettings.MIN_PIXELS;
import static dev.stoker.node.NodeSettings.MODEL;
import static dev.stoker.node.NodeSettings.OVERRIDE_MODEL;
import static dev.stoker.node.NodeSettings.PROCESSOR_KEY;
import static dev.stoker.node.NodeSettings.TOKENIZER;
import static dev.stoker.node.NodeSettings.TRANSFORMERS;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.model.ModelFolder;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.TransformersVersion;
import dev.stoker.node.NodeSettings.ChatTemplateChoice;
import dev.stoker.text.ChatTemplateException;
import dev.stoker.text.JinjaChatRenderer;
import dev.stoker.text.TemplateCheck;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * What a model folder ({@code --model DIR}) gives a configuration: it is read once, as the configuration is built, and
 * each setting it knows (the family, the pixel bounds, the tokenizer, the transformers release) is adopted where none
 * was given. A setting given that disagrees with the model is refused, naming both values and the model's file, so
 * that a job never trains on a processor its model was not saved with by accident; {@code --override-model} keeps the
 * given value and warns once instead. The chat template is checked here too: with the built-in renderer the model's
 * template must render the template cases as Stoker's does, with the model's own it must compile.
 *
 * <p>A setting given beside {@code --transformers} is the exception: the model's release is the one that saved it,
 * the setting the one the trainer runs, so the setting wins without a word.
 */
final class ModelDefaults {
    /**
     * What the model folder gave: the folder, the settings taken from it, what {@code --override-model} let through
     * (each once), and what it adds to the encoding for the job's fingerprint ({@link EncodeOptions#model()}): the
     * SHA-256 of the tokenizer the job encodes with. {@link #NONE} without a model folder.
     */
    record Adopted(ModelFolder model, Set<ConfigKey<?>> fromModel, List<String> warnings, String identity) {
        static final Adopted NONE = new Adopted(null, Set.of(), List.of(), null);

        Adopted {
            fromModel = Set.copyOf(fromModel);
            warnings = List.copyOf(warnings);
        }
    }

    /**
     * Template checks already made, by the template's SHA-256, family and renderer: the check renders 19 chats, and a
     * configuration is built more than once. Each holds what is wrong ("" for nothing), without the file it was read from.
     */
    private static final Map<String, String> TEMPLATE_CHECKS = new ConcurrentHashMap<>();

    private ModelDefaults() {}

    /**
     * Reads the model folder of {@code values} ({@code --model}), if any, and puts into {@code values} the settings it
     * gives that are not {@code given}; refuses (ConfigException) a given setting that disagrees with it unless
     * {@code --override-model}, a model folder that cannot be read, and a chat template that cannot be used.
     */
    static Adopted apply(Map<ConfigKey<?>, Object> values, Set<ConfigKey<?>> given) {
        Path dir = (Path) values.get(MODEL);
        boolean override = Boolean.TRUE.equals(values.get(OVERRIDE_MODEL));
        if (dir == null) {
            if (override) throw new ConfigException("--override-model goes with --model");
            if (values.get(CHAT_TEMPLATE) == ChatTemplateChoice.MODEL) throw new ConfigException("--chat-template model needs --model DIR");
            return Adopted.NONE;
        }
        ModelFolder model;
        try {
            model = ModelFolder.read(dir);
        } catch (ModelFolder.ModelFolderException e) {
            throw new ConfigException("--model: " + e.getMessage());
        }
        var fromModel = new LinkedHashSet<ConfigKey<?>>();
        var warnings = new ArrayList<String>();
        var adoption = new Adoption(values, given, fromModel, warnings, override);
        String pre = dir.resolve(ModelFolder.PREPROCESSOR_CONFIG).toString();
        adoption.adopt(PROCESSOR_KEY, model.family(), dir.resolve(ModelFolder.CONFIG) + " model_type");
        adoption.adopt(MIN_PIXELS, model.vision().minPixels(), pre + " min_pixels (or size.shortest_edge)");
        adoption.adopt(MAX_PIXELS, model.vision().maxPixels(), pre + " max_pixels (or size.longest_edge)");
        // --transformers given wins: the model's is the release that saved it, the setting the one the trainer runs
        if (!given.contains(TRANSFORMERS) && model.transformersVersion() != null) {
            try {
                values.put(TRANSFORMERS, TransformersVersion.parse(model.transformersVersion()));
            } catch (IllegalArgumentException e) {
                throw new ConfigException("--model: " + dir.resolve(ModelFolder.CONFIG) + ": transformers_version: " + e.getMessage()
                        + "; give --transformers VERSION, the release the trainer runs");
            }
            fromModel.add(TRANSFORMERS);
        }
        Path tokenizer = (Path) values.get(TOKENIZER);
        String tokenizerSha256 = model.tokenizerSha256();
        if (tokenizer == null) {
            values.put(TOKENIZER, model.tokenizer());
            fromModel.add(TOKENIZER);
        } else {
            tokenizerSha256 = sha256(tokenizer);
            if (!tokenizerSha256.equals(model.tokenizerSha256())) {
                String what = "--tokenizer " + tokenizer + " is not the model's " + model.tokenizer() + " (their bytes differ)";
                if (!override) throw new ConfigException(what + "; leave --tokenizer out, or add --override-model");
                warnings.add(what + ": encoding with " + tokenizer + " (--override-model)");
            }
        }
        checkTemplate(model, ((ProcessorPreset) values.get(PROCESSOR_KEY)).chatFamily(), (ChatTemplateChoice) values.get(CHAT_TEMPLATE));
        return new Adopted(model, fromModel, warnings, "tokenizer:" + tokenizerSha256);
    }

    /** One adoption's state: the values being filled, the settings given, and what was taken or let through. */
    private record Adoption(Map<ConfigKey<?>, Object> values, Set<ConfigKey<?>> given, Set<ConfigKey<?>> fromModel,
                            List<String> warnings, boolean override) {
        /** The model's value of {@code key} where none was given; a given one that differs is refused, or kept and warned about. */
        <T> void adopt(ConfigKey<T> key, T modelValue, String source) {
            if (!given.contains(key)) {
                values.put(key, modelValue);
                fromModel.add(key);
                return;
            }
            @SuppressWarnings("unchecked") T value = (T) values.get(key);
            if (value.equals(modelValue)) return;
            String what = key.option() + " " + key.format(value) + " disagrees with the model's " + key.format(modelValue) + " ("
                    + source + ")";
            if (!override) throw new ConfigException(what + "; leave " + key.option() + " out, or add --override-model");
            warnings.add(what + ": using " + key.format(value) + " (--override-model)");
        }
    }

    /**
     * The model's chat template against {@code choice}: with the built-in renderer, the model's template must render the
     * template cases as the built-in template of {@code family} does (else refused, naming the case and character);
     * with the model's own, it must compile. A model without a template encodes with the built-in one.
     */
    private static void checkTemplate(ModelFolder model, ProcessorPreset.ChatFamily family, ChatTemplateChoice choice) {
        String source = model.chatTemplate();
        Path file = model.dir().resolve(model.chatTemplateSource() == null ? ModelFolder.CHAT_TEMPLATE_JSON : model.chatTemplateSource());
        if (source == null) {
            if (choice == ChatTemplateChoice.MODEL)
                throw new ConfigException("--chat-template model: " + model.dir() + " has no chat template (chat_template.jinja, "
                        + "chat_template.json or tokenizer_config.json's chat_template)");
            return;
        }
        // cached without the file's path: two folders may hold the same template, and each refusal names its own
        String problem = TEMPLATE_CHECKS.computeIfAbsent(EncodeOptions.sha256(source) + "/" + family + "/" + choice, k -> {
            try {
                if (choice == ChatTemplateChoice.MODEL) {
                    JinjaChatRenderer.compile(source);
                    return "";
                }
                return TemplateCheck.compare(source, family).map(d -> "renders differently from Stoker's built-in "
                        + ConfigKey.cliName(family) + " template: " + d.message()
                        + "; to encode with the model's own template, add --chat-template model").orElse("");
            } catch (ChatTemplateException e) {
                return "cannot be used: " + e.getMessage();
            }
        });
        if (!problem.isEmpty()) throw new ConfigException("--model: the chat template of " + file + " " + problem);
    }

    /** The SHA-256 of {@code file}, hex; a file that cannot be read is refused, naming it. */
    static String sha256(Path file) {
        try (var in = Files.newInputStream(file)) {
            var md = MessageDigest.getInstance("SHA-256");
            byte[] buf = new byte[1 << 16];
            for (int n; (n = in.read(buf)) > 0; ) md.update(buf, 0, n);
            return HexFormat.of().formatHex(md.digest());
        } catch (NoSuchFileException e) {
            throw new ConfigException(file + ": no such file");
        } catch (IOException e) {
            throw new ConfigException(file + ": cannot read: " + e.getMessage());
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
