"""Train a Keras sample model: the same small CNN on scikit-learn's real 8×8 handwritten digits, in NHWC.

    python sample_models/train_digits_keras.py      # ~15 s on 2 CPU cores (half of it importing TensorFlow), seeded

Writes, beside this script (or into the directory given as the first argument):
    digits_keras.keras        the trained model in the Keras 3 format (input x: 1×8×8×1, output: 1×10 logits)
    digits_keras_calib.npz    200 training images, inputs only (x: N×8×8×1), for int8 calibration
    digits_keras_eval.npz     the held-out split (x: N×8×8×1, labels: N) for verification and accuracy

The split and the calibration images are the same digits as train_digits_cnn.py's, laid out channels-last.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"  # before TensorFlow is imported: keep its start-up chatter quiet

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import layers  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

HERE = Path(__file__).resolve().parent
SEED = 0


def digits_cnn(batch_size: int | None = 1) -> keras.Model:
    """Conv 16 → Conv 32 → MaxPool 2 → Flatten → Dense 64 → Dense 10 (logits), on an N×8×8×1 input named x."""
    x = keras.Input(shape=(8, 8, 1), batch_size=batch_size, name="x")
    h = layers.Conv2D(16, 3, padding="same", activation="relu", name="conv1")(x)
    h = layers.Conv2D(32, 3, padding="same", activation="relu", name="conv2")(h)
    h = layers.MaxPooling2D(2, name="pool")(h)
    h = layers.Flatten(name="flatten")(h)
    h = layers.Dense(64, activation="relu", name="fc1")(h)
    logits = layers.Dense(10, name="logits")(h)
    return keras.Model(x, logits, name="digits_keras")


def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits scaled to [0, 1] as N×8×8×1 float32; a stratified 80/20 split, seeded (as train_digits_cnn.py)."""
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, :, :, None].copy()
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.2, random_state=SEED, stratify=y)


def train(model: keras.Model, x: np.ndarray, y: np.ndarray, epochs: int = 30) -> keras.Model:
    # The batch-1 Input only fixes the signature that is saved; Keras trains it on batches of 64 all the same.
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=64, epochs=epochs, shuffle=True, verbose=0)
    return model


def predict(model: keras.Model, x: np.ndarray) -> np.ndarray:
    return np.asarray(model.predict(x, batch_size=64, verbose=0))


def accuracy(model: keras.Model, x: np.ndarray, y: np.ndarray) -> float:
    return float((predict(model, x).argmax(1) == y).mean())


def main(out_dir: Path = HERE) -> None:
    keras.utils.set_random_seed(SEED)
    tf.config.experimental.enable_op_determinism()
    out_dir.mkdir(parents=True, exist_ok=True)
    x_train, x_eval, y_train, y_eval = digits_split()
    model = train(digits_cnn(batch_size=1), x_train, y_train)
    acc = accuracy(model, x_eval, y_eval)
    model.save(out_dir / "digits_keras.keras")
    calib = np.random.default_rng(SEED).choice(len(x_train), 200, replace=False)
    np.savez_compressed(out_dir / "digits_keras_calib.npz", x=np.array(x_train[np.sort(calib)], copy=True))
    np.savez_compressed(out_dir / "digits_keras_eval.npz",
                        x=np.array(x_eval, copy=True), labels=np.array(y_eval, dtype=np.int64, copy=True))
    print(f"digits_keras: eval accuracy {acc * 100:.2f}% on {len(y_eval)} held-out digits; wrote {out_dir}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
