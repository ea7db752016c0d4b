//! Convolutional networks unrolled into their layers, as torchvision builds
//! them (ResNet v1.5, MobileNetV2): the same list gives the parameter count
//! and drives the replay (`families::cnn`).

use super::CnnArch;
use alloc::vec::Vec;

/// One layer of an unrolled network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// Convolution (no bias) with its output shape.
    Conv {
        /// Input channels.
        cin: u64,
        /// Output channels.
        cout: u64,
        /// Kernel edge.
        k: u64,
        /// Groups (depthwise: = cin).
        groups: u64,
        /// Output height/width.
        out_hw: u64,
        /// Input height/width.
        in_hw: u64,
    },
    /// BatchNorm2d over `c` channels.
    BatchNorm {
        /// Channels.
        c: u64,
    },
    /// In-place ReLU (`nn.ReLU(inplace=True)`, ResNet): saves its output.
    Relu,
    /// Out-of-place ReLU6 (`Conv2dNormActivation`'s `nn.ReLU6()`, MobileNetV2):
    /// a new tensor; hardtanh's backward saves its input.
    Relu6,
    /// MaxPool2d 3x3 stride 2 (output height/width).
    MaxPool {
        /// Output height/width.
        out_hw: u64,
    },
    /// Start of a residual block: the block input is kept as `identity`.
    BlockStart,
    /// Start of the downsample branch: runs on the block input.
    BranchStart,
    /// End of a residual block: `out += identity` (in place) or `out + x`.
    BlockEnd {
        /// In-place add (ResNet) or a new tensor (MobileNetV2).
        inplace: bool,
    },
    /// End of a block without a residual (MobileNetV2 strided blocks).
    BlockEndNoResidual,
    /// Global average pool, flatten and the classifier.
    Head {
        /// Features into the classifier.
        features: u64,
        /// Classes.
        classes: u64,
    },
}

fn conv_out(hw: u64, k: u64, stride: u64) -> u64 {
    let pad = k / 2;
    (hw + 2 * pad - k) / stride + 1
}

/// Unrolls a network for a square input of `image` pixels.
pub fn layers(arch: &CnnArch, image: u64) -> Vec<Layer> {
    let mut v = Vec::new();
    let conv = |v: &mut Vec<Layer>,
                cin: u64,
                cout: u64,
                k: u64,
                stride: u64,
                groups: u64,
                hw: u64|
     -> u64 {
        let out_hw = conv_out(hw, k, stride);
        v.push(Layer::Conv {
            cin,
            cout,
            k,
            groups,
            out_hw,
            in_hw: hw,
        });
        out_hw
    };
    match *arch {
        CnnArch::ResNet {
            blocks,
            bottleneck,
            num_classes,
        } => {
            let mut hw = conv(&mut v, 3, 64, 7, 2, 1, image);
            v.push(Layer::BatchNorm { c: 64 });
            v.push(Layer::Relu);
            hw = (hw + 2 - 3) / 2 + 1;
            v.push(Layer::MaxPool { out_hw: hw });
            let expansion = if bottleneck { 4 } else { 1 };
            let mut cin = 64u64;
            for (stage, &n) in blocks.iter().enumerate() {
                let width = 64u64 << stage;
                for i in 0..n {
                    let stride = if stage > 0 && i == 0 { 2 } else { 1 };
                    let cout = width * expansion;
                    v.push(Layer::BlockStart);
                    let in_hw = hw;
                    if bottleneck {
                        conv(&mut v, cin, width, 1, 1, 1, hw);
                        v.push(Layer::BatchNorm { c: width });
                        v.push(Layer::Relu);
                        hw = conv(&mut v, width, width, 3, stride, 1, hw);
                        v.push(Layer::BatchNorm { c: width });
                        v.push(Layer::Relu);
                        conv(&mut v, width, cout, 1, 1, 1, hw);
                        v.push(Layer::BatchNorm { c: cout });
                    } else {
                        hw = conv(&mut v, cin, width, 3, stride, 1, hw);
                        v.push(Layer::BatchNorm { c: width });
                        v.push(Layer::Relu);
                        conv(&mut v, width, width, 3, 1, 1, hw);
                        v.push(Layer::BatchNorm { c: width });
                    }
                    if stride != 1 || cin != cout {
                        v.push(Layer::BranchStart);
                        v.push(Layer::Conv {
                            cin,
                            cout,
                            k: 1,
                            groups: 1,
                            out_hw: hw,
                            in_hw,
                        });
                        v.push(Layer::BatchNorm { c: cout });
                    }
                    v.push(Layer::BlockEnd { inplace: true });
                    v.push(Layer::Relu);
                    cin = cout;
                }
            }
            v.push(Layer::Head {
                features: cin,
                classes: num_classes as u64,
            });
        }
        CnnArch::MobileNetV2 { num_classes } => {
            let mut hw = conv(&mut v, 3, 32, 3, 2, 1, image);
            v.push(Layer::BatchNorm { c: 32 });
            v.push(Layer::Relu6);
            let mut cin = 32u64;
            for &(t, c, n, s) in &[
                (1u64, 16u64, 1u32, 1u64),
                (6, 24, 2, 2),
                (6, 32, 3, 2),
                (6, 64, 4, 2),
                (6, 96, 3, 1),
                (6, 160, 3, 2),
                (6, 320, 1, 1),
            ] {
                for i in 0..n {
                    let stride = if i == 0 { s } else { 1 };
                    let hidden = cin * t;
                    let residual = stride == 1 && cin == c;
                    v.push(Layer::BlockStart);
                    if t != 1 {
                        conv(&mut v, cin, hidden, 1, 1, 1, hw);
                        v.push(Layer::BatchNorm { c: hidden });
                        v.push(Layer::Relu6);
                    }
                    hw = conv(&mut v, hidden, hidden, 3, stride, hidden, hw);
                    v.push(Layer::BatchNorm { c: hidden });
                    v.push(Layer::Relu6);
                    conv(&mut v, hidden, c, 1, 1, 1, hw);
                    v.push(Layer::BatchNorm { c });
                    v.push(if residual {
                        Layer::BlockEnd { inplace: false }
                    } else {
                        Layer::BlockEndNoResidual
                    });
                    cin = c;
                }
            }
            conv(&mut v, cin, 1280, 1, 1, 1, hw);
            v.push(Layer::BatchNorm { c: 1280 });
            v.push(Layer::Relu6);
            v.push(Layer::Head {
                features: 1280,
                classes: num_classes as u64,
            });
        }
    }
    v
}

/// Parameter count (convolutions, BatchNorm affine, classifier).
pub fn params(arch: &CnnArch) -> u64 {
    layers(arch, 224)
        .iter()
        .map(|l| match *l {
            Layer::Conv {
                cin,
                cout,
                k,
                groups,
                ..
            } => cout * (cin / groups) * k * k,
            Layer::BatchNorm { c } => 2 * c,
            Layer::Head { features, classes } => features * classes + classes,
            _ => 0,
        })
        .sum()
}
