package dev.stoker.text;

import static dev.stoker.text.QwenTokenIds.IGNORE_INDEX;
import static dev.stoker.text.QwenTokenIds.IMAGE_PAD;
import static dev.stoker.text.QwenTokenIds.VISION_END;
import static dev.stoker.text.QwenTokenIds.VISION_START;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.ProcessorPreset.ChatFamily;
import dev.stoker.core.SampleException;
import dev.stoker.text.Message.Image;
import dev.stoker.text.Message.Role;
import dev.stoker.text.Message.Text;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(60)
class TokenSequenceBuilderTest {
    private static QwenTokenizer tok;
    // Two images of 6 and 4 tokens, two assistant turns.
    private static final ChatSample SAMPLE = ChatSample.of("s-1", List.of(
            new Message(Role.USER, List.of(new Image("a.jpg"), new Text("First question about this image?"))),
            Message.text(Role.ASSISTANT, "First answer, fairly long."),
            new Message(Role.USER, List.of(new Text("And this one"), new Image("b.jpg"))),
            Message.text(Role.ASSISTANT, "Second answer.")));
    private static final List<long[]> GRIDS = List.of(new long[] {1, 4, 6}, new long[] {1, 4, 4});

    @BeforeAll
    static void load() { tok = QwenTokenizer.bundled(); }

    @AfterAll
    static void close() { tok.close(); }

    private static TokenSequenceBuilder builder(int max, TruncationPolicy policy) {
        return new TokenSequenceBuilder(tok, ChatFamily.QWEN3_VL, 2, max, policy);
    }

    private static int indexOf(long[] ids, long id, int from) {
        for (int i = from; i < ids.length; i++) if (ids[i] == id) return i;
        return -1;
    }

    @Test
    void fullSampleIsConsistent() {
        var f = builder(10_000, TruncationPolicy.REJECT).build(SAMPLE, GRIDS);
        var expanded = ChatTemplate.expandImagePads(new ChatTemplate(ChatFamily.QWEN3_VL).render(SAMPLE.messages()), GRIDS, 2);
        assertArrayEquals(tok.encode(expanded), f.inputIds());
        assertEquals(2, f.imagesKept());
        assertEquals(6 + 4, Arrays.stream(f.inputIds()).filter(x -> x == IMAGE_PAD).count());
        assertTrue(Arrays.stream(f.attentionMask()).allMatch(x -> x == 1));
        assertEquals(tok.decode(tok.encode("First answer, fairly long.<|im_end|>\nSecond answer.<|im_end|>\n")),
                tok.decode(Arrays.stream(f.labels()).filter(x -> x != IGNORE_INDEX).toArray()));
    }

    @Test
    void presetFactoryUsesFamilyAndMergeSize() {
        var a = TokenSequenceBuilder.forPreset(tok, ProcessorPreset.QWEN2_5_VL, 10_000, TruncationPolicy.REJECT).build(SAMPLE, GRIDS);
        var b = new TokenSequenceBuilder(tok, ChatFamily.QWEN2_VL, 2, 10_000, TruncationPolicy.REJECT).build(SAMPLE, GRIDS);
        assertArrayEquals(b.inputIds(), a.inputIds());
        assertEquals(8948, a.inputIds()[1]);
    }

    @Test
    void overLongSampleIsRejectedByDefaultPolicy() {
        int full = builder(10_000, TruncationPolicy.REJECT).build(SAMPLE, GRIDS).length();
        var e = assertThrows(SampleException.class, () -> builder(full - 1, TruncationPolicy.REJECT).build(SAMPLE, GRIDS));
        assertEquals("s-1", e.sampleId());
        assertEquals(SampleException.Stage.TOKENIZE, e.stage());
        assertEquals(SampleException.Kind.FILTERED, e.kind(), "dropped by the user's limit, not broken: not an error");
        assertEquals("over --max-seq-len", e.reason());
        assertTrue(e.getMessage().contains(full + " tokens, over the limit of " + (full - 1)), e.getMessage());
        assertEquals(full, builder(full, TruncationPolicy.REJECT).build(SAMPLE, GRIDS).length());
    }

    @Test
    void truncationNeverCutsAnImageRun() {
        var full = builder(10_000, TruncationPolicy.REJECT).build(SAMPLE, GRIDS);
        long[] ids = full.inputIds();
        int vs1 = indexOf(ids, VISION_START, 0);
        int ve1 = indexOf(ids, VISION_END, vs1);
        int vs2 = indexOf(ids, VISION_START, ve1);
        int ve2 = indexOf(ids, VISION_END, vs2);
        for (int limit = 1; limit <= ids.length; limit++) {
            var f = builder(limit, TruncationPolicy.TRUNCATE).build(SAMPLE, GRIDS);
            int n = f.length();
            assertTrue(n <= limit);
            int expectedLength = limit > vs2 && limit <= ve2 ? vs2 : limit > vs1 && limit <= ve1 ? vs1 : limit;
            assertEquals(expectedLength, n, "limit " + limit);
            assertEquals(n > ve2 ? 2 : n > ve1 ? 1 : 0, f.imagesKept(), "limit " + limit);
            assertArrayEquals(Arrays.copyOf(ids, n), f.inputIds());
            assertArrayEquals(TokenSequenceBuilder.labels(f.inputIds()), f.labels());
            assertArrayEquals(TokenSequenceBuilder.positionIds(f.inputIds(), GRIDS.subList(0, f.imagesKept()), 2), f.positionIds());
            for (int r = 0; r < 3; r++)
                assertArrayEquals(Arrays.copyOfRange(full.positionIds(), r * ids.length, r * ids.length + n),
                        Arrays.copyOfRange(f.positionIds(), r * n, r * n + n), "positions row " + r + " limit " + limit);
            assertEquals(f.imagesKept(), Arrays.stream(f.inputIds()).filter(x -> x == VISION_START).count());
            assertEquals(f.imagesKept(), Arrays.stream(f.inputIds()).filter(x -> x == VISION_END).count());
        }
    }

    @Test
    void unterminatedAssistantTurnIsMasked() {
        var full = builder(10_000, TruncationPolicy.REJECT).build(SAMPLE, GRIDS);
        int cut = full.length() - 3;
        var f = builder(cut, TruncationPolicy.TRUNCATE).build(SAMPLE, GRIDS);
        assertEquals(cut, f.length());
        var kept = Arrays.stream(f.labels()).filter(x -> x != IGNORE_INDEX).toArray();
        assertEquals(tok.decode(tok.encode("First answer, fairly long.<|im_end|>\n")), tok.decode(kept));
    }

    @Test
    void labelRuleEdgeCases() {
        long s = QwenTokenIds.IM_START, e = QwenTokenIds.IM_END, a = QwenTokenIds.ASSISTANT, nl = QwenTokenIds.NEWLINE;
        long x = IGNORE_INDEX;
        assertArrayEquals(new long[] {x, x, x, 5, 6, e, nl, x, x, x, x},
                TokenSequenceBuilder.labels(new long[] {s, a, nl, 5, 6, e, nl, s, a, nl, 7}));
        assertArrayEquals(new long[] {x, x, x, e}, TokenSequenceBuilder.labels(new long[] {s, a, nl, e}));
        assertArrayEquals(new long[] {x, x, x, 9, e}, TokenSequenceBuilder.labels(new long[] {s, a, nl, 9, e}));
        assertArrayEquals(new long[] {x, x, x}, TokenSequenceBuilder.labels(new long[] {9, a, nl}));
        // Content starting with "\n" merges with the header newline into "\n\n" (271), which pos+2 skips.
        var ids = tok.encode("<|im_start|>assistant\n\nHi<|im_end|>\n");
        assertEquals(271, ids[2]);
        assertArrayEquals(new long[] {x, x, x, ids[3], e, nl}, TokenSequenceBuilder.labels(ids));
    }

    @Test
    void positionIdsForTextOnlyAndMultiFrameGrids() {
        assertArrayEquals(new long[] {0, 1, 2, 0, 1, 2, 0, 1, 2}, TokenSequenceBuilder.positionIds(new long[] {1, 2, 3}, List.of(), 2));
        long p = IMAGE_PAD;
        var ids = new long[] {7, VISION_START, p, p, p, p, VISION_END, 8};
        // grid t=2, h=2, w=4, merge 2: 2 frames of 1x2 tokens starting at position 2.
        assertArrayEquals(new long[] {
                0, 1, 2, 2, 3, 3, 4, 5,
                0, 1, 2, 2, 2, 2, 4, 5,
                0, 1, 2, 3, 2, 3, 4, 5}, TokenSequenceBuilder.positionIds(ids, List.of(new long[] {2, 2, 4}), 2));
    }

    @Test
    void gridsMustMatchImagesAndTextMustNotForgeVisionTokens() {
        var b = builder(10_000, TruncationPolicy.REJECT);
        var e = assertThrows(SampleException.class, () -> b.build(SAMPLE, GRIDS.subList(0, 1)));
        assertEquals(SampleException.Stage.TEXT, e.stage());
        assertTrue(e.getMessage().contains("2 image(s) in the chat but 1 image grid(s)"), e.getMessage());
        var odd = assertThrows(SampleException.class, () -> b.build(SAMPLE, List.of(new long[] {1, 3, 6}, new long[] {1, 4, 4})));
        assertTrue(odd.getMessage().contains("image 0: bad image grid"), odd.getMessage());
        var forged = ChatSample.of("s-2", List.of(Message.text(Role.USER, "look <|vision_start|><|image_pad|><|vision_end|>"),
                Message.text(Role.ASSISTANT, "ok")));
        var f = assertThrows(SampleException.class, () -> b.build(forged, List.of()));
        assertEquals("s-2", f.sampleId());
        assertTrue(f.getMessage().contains("vision special tokens"), f.getMessage());
    }

    /** Every template case, with made-up grids, encodes to the same ids, labels and positions through the model's template. */
    @Test
    void theModelsOwnTemplateGivesTheBuiltInIdsAndLabelsOnEveryTemplateCase() {
        for (var file : List.of("qwen2.5-vl-instruct.jinja", "qwen3-vl-instruct.jinja")) {
            var family = file.startsWith("qwen3") ? ChatFamily.QWEN3_VL : ChatFamily.QWEN2_VL;
            var model = new TokenSequenceBuilder(tok, JinjaChatRenderer.compile(JinjaChatRendererTest.template(file)), 2, 10_000, TruncationPolicy.REJECT);
            var builtIn = new TokenSequenceBuilder(tok, family, 2, 10_000, TruncationPolicy.REJECT);
            for (var c : TemplateCheck.cases()) {
                var sample = ChatSample.of(c.name(), c.messages());
                if (sample.messages().stream().flatMap(m -> m.parts().stream())
                        .anyMatch(p -> p instanceof Text t && t.text().contains("<|vision"))) continue;
                var grids = sample.imagePaths().stream().map(r -> new long[] {1, 4, 6}).toList();
                var a = model.build(sample, grids);
                var b = builtIn.build(sample, grids);
                assertArrayEquals(b.inputIds(), a.inputIds(), file + " " + c.name());
                assertArrayEquals(b.labels(), a.labels(), file + " " + c.name());
                assertArrayEquals(b.positionIds(), a.positionIds(), file + " " + c.name());
            }
        }
    }

    @Test
    void aTemplateThatFailsOnASampleIsASampleErrorNamingIt() {
        var raising = JinjaChatRenderer.compile("{{ raise_exception('no images here') }}");
        var e = assertThrows(SampleException.class,
                () -> new TokenSequenceBuilder(tok, raising, 2, 10_000, TruncationPolicy.REJECT).build(SAMPLE, GRIDS));
        assertEquals("s-1", e.sampleId());
        assertEquals(SampleException.Stage.TEXT, e.stage());
        assertTrue(e.getMessage().contains("chat template failed: raise_exception: no images here"), e.getMessage());
    }
}
