package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.text.JinjaChatRenderer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/** An encoder given the model's own template (the Qwen2-VL/2.5-VL Hub text) encodes samples exactly as the default one. */
@Timeout(60)
@ExtendWith(SharedTokenizer.class)
class ModelTemplateEncodingTest {
    /** The published Qwen2-VL / Qwen2.5-VL {@code chat_template} (see stoker-text's test templates for its source). */
    private static final String QWEN2_VL_TEMPLATE = "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
            + "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful "
            + "assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
            + "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or "
            + "'image' in content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
            + "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'video' "
            + "or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video "
            + "{{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}"
            + "{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
            + "<|im_start|>assistant\n{% endif %}";

    @TempDir Path tmp;

    @Test
    void samplesEncodeTheSameThroughTheModelsTemplate() throws Exception {
        Path manifest = TestDatasets.write(tmp, 8, Set.of());
        var builtIn = new SampleEncoder(FeederTest.OPTIONS, SharedTokenizer.get());
        var model = new SampleEncoder(FeederTest.OPTIONS, SharedTokenizer.get(), JinjaChatRenderer.compile(QWEN2_VL_TEMPLATE));
        SampleEncoder.ImageSource images = (id, ref) -> {
            try {
                return Files.readAllBytes(manifest.getParent().resolve(ref));
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        };
        int n = 0;
        for (var line : Files.readAllLines(manifest, StandardCharsets.UTF_8)) {
            var bytes = line.getBytes(StandardCharsets.UTF_8);
            var a = builtIn.encodeLine(bytes, "line", images);
            var b = model.encodeLine(bytes, "line", images);
            assertArrayEquals(a.inputIds(), b.inputIds(), a.id());
            assertArrayEquals(a.labels(), b.labels(), a.id());
            assertArrayEquals(a.positionIds(), b.positionIds(), a.id());
            assertArrayEquals(a.imageGridThw(), b.imageGridThw(), a.id());
            assertArrayEquals(a.pixelValues(), b.pixelValues(), a.id());
            n++;
        }
        assertEquals(8, n);
    }
}
