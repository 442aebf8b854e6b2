package dev.stoker.image.qwenvl;

import java.util.Locale;

/**
 * Which Hugging Face Qwen2-VL image processor Stoker reproduces for still images: the two give different
 * {@code pixel_values} for the same image, and {@code AutoProcessor.from_pretrained} picks one by transformers version
 * and installed packages (docs/model-inputs.md).
 *
 * <p>Both use the same {@code smart_resize} (transformers 5.18.0 {@code image_processing_qwen2_vl.py} and
 * {@code image_processing_pil_qwen2_vl.py} are identical there; 4.57.6's fast processor imports the slow one's) and
 * the same patch layout (the image repeated over the temporal patch). They differ in two steps:
 * <ul>
 *   <li>resize: Pillow's {@code Image.resize(BICUBIC)} ({@link BicubicResizer}) versus torchvision's antialiased
 *       bicubic on a uint8 tensor ({@link dev.stoker.image.torch.TorchBicubicU8Resizer}), 1–2 levels apart;</li>
 *   <li>normalize: {@code ((float)(v·(1/255)) − mean) / std} versus the fused
 *       {@code (float(v) − f32(f32(mean)·255)) / f32(f32(std)·255)} of {@code TorchvisionBackend.rescale_and_normalize}
 *       (correction 8 of vectors/qwen-vl-video/README.md), which differ in the last bits.</li>
 * </ul>
 */
public enum ImageBackend {
    /** {@code Qwen2VLImageProcessorPil} (5.x) / the slow {@code Qwen2VLImageProcessor} (4.x): Pillow resize. */
    PIL,
    /** {@code Qwen2VLImageProcessor} (5.x, {@code TorchvisionBackend}) / {@code Qwen2VLImageProcessorFast} (4.x). */
    TORCHVISION;

    /** The command-line spelling: {@code pil} or {@code torchvision}. */
    public String cliName() { return name().toLowerCase(Locale.ROOT); }

    /** Parses {@code pil} or {@code torchvision} (any case). */
    public static ImageBackend parse(String name) {
        return switch (name.toLowerCase(Locale.ROOT)) {
            case "pil" -> PIL;
            case "torchvision" -> TORCHVISION;
            default -> throw new IllegalArgumentException("unknown image backend '" + name + "' (pil, torchvision)");
        };
    }
}
