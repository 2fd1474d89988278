/// ```text
/// schedule of Mlp: 3 buckets, 10020874 parameters (38.23 MiB), first bucket closes at 1.00 MiB, others at 8.00 MiB
/// bucket  all-reduce launched after       bytes  members (buffer order)
/// b0      fc3.backward                16.09 MiB  head.bias, head.weight, fc3.bias, fc3.weight
/// b1      fc2.backward                16.01 MiB  fc2.bias, fc2.weight
/// b2      fc1.backward                 6.13 MiB  fc1.bias, fc1.weight
/// ```
pub struct Mlp {
    fc1: Linear<784, 2048>,
    act1: Relu,
    fc2: Linear<2048, 2048>,
    act2: Relu,
    fc3: Linear<2048, 2048>,
    act3: Relu,
    head: Linear<2048, 10>,
}
#[doc = concat!(
    " Activations, saved state and input gradients of one `", "Mlp",
    "` step; reused across steps."
)]
#[derive(Default)]
pub struct MlpWorkspace {
    pub input: ::overlap::Matrix,
    pub fc1_out: ::overlap::Matrix,
    pub fc1_saved: <Linear<784, 2048> as ::overlap::Layer>::Saved,
    pub fc1_grad: ::overlap::Matrix,
    pub act1_out: ::overlap::Matrix,
    pub act1_saved: <Relu as ::overlap::Layer>::Saved,
    pub act1_grad: ::overlap::Matrix,
    pub fc2_out: ::overlap::Matrix,
    pub fc2_saved: <Linear<2048, 2048> as ::overlap::Layer>::Saved,
    pub fc2_grad: ::overlap::Matrix,
    pub act2_out: ::overlap::Matrix,
    pub act2_saved: <Relu as ::overlap::Layer>::Saved,
    pub act2_grad: ::overlap::Matrix,
    pub fc3_out: ::overlap::Matrix,
    pub fc3_saved: <Linear<2048, 2048> as ::overlap::Layer>::Saved,
    pub fc3_grad: ::overlap::Matrix,
    pub act3_out: ::overlap::Matrix,
    pub act3_saved: <Relu as ::overlap::Layer>::Saved,
    pub act3_grad: ::overlap::Matrix,
    pub head_out: ::overlap::Matrix,
    pub head_saved: <Linear<2048, 10> as ::overlap::Layer>::Saved,
}
#[doc = concat!(
    " The gradient buckets of `", "Mlp",
    "`, in launch order. Each parameter's gradient is a view at a fixed offset."
)]
pub struct MlpGrads {
    /// Bucket 0: head.bias, head.weight, fc3.bias, fc3.weight (4216842 elements), launched after `fc3.backward`.
    b0: ::overlap::GradBucket,
    /// Bucket 1: fc2.bias, fc2.weight (4196352 elements), launched after `fc2.backward`.
    b1: ::overlap::GradBucket,
    /// Bucket 2: fc1.bias, fc1.weight (1607680 elements), launched after `fc1.backward`.
    b2: ::overlap::GradBucket,
    micro_steps: usize,
}
#[doc = concat!(
    " The gradient buckets of `", "Mlp",
    "` while they are being all-reduced: only `step` can wait for them."
)]
#[must_use = "in-flight gradients must be passed to `step`"]
pub struct MlpInFlight {
    b0: ::overlap::InFlight,
    b1: ::overlap::InFlight,
    b2: ::overlap::InFlight,
    grad_scale: f32,
}
impl ::overlap::GradientBuckets for MlpGrads {
    fn buckets(&self) -> ::std::vec::Vec<&::overlap::GradBucket> {
        ::std::vec![& self.b0, & self.b1, & self.b2]
    }
    fn micro_steps(&self) -> usize {
        self.micro_steps
    }
}
impl ::overlap::DistributedModel for Mlp {
    const SCHEDULE: ::overlap::plan::Schedule = ::overlap::plan::Schedule {
        model: ::overlap::__private::Cow::Borrowed("Mlp"),
        limits: ::overlap::plan::BucketLimits::Capped {
            first_bucket_bytes: 1048576,
            bucket_cap_bytes: 8388608,
        },
        layers: ::overlap::__private::Cow::Borrowed(
            &[
                ::overlap::plan::LayerInfo {
                    name: ::overlap::__private::Cow::Borrowed("fc1"),
                    kind: ::overlap::__private::Cow::Borrowed("Linear<784, 2048>"),
                    width: ::overlap::plan::Width::Fixed {
                        input: 784,
                        output: 2048,
                    },
                    flops_per_sample: 3211264,
                    params: ::overlap::__private::Cow::Borrowed(
                        &[
                            ::overlap::plan::ParamInfo {
                                name: ::overlap::__private::Cow::Borrowed("weight"),
                                shape: ::overlap::__private::Cow::Borrowed(&[2048, 784]),
                                index: 0,
                                bucket: 2,
                                offset: 2048,
                            },
                            ::overlap::plan::ParamInfo {
                                name: ::overlap::__private::Cow::Borrowed("bias"),
                                shape: ::overlap::__private::Cow::Borrowed(&[2048]),
                                index: 1,
                                bucket: 2,
                                offset: 0,
                            },
                        ],
                    ),
                },
                ::overlap::plan::LayerInfo {
                    name: ::overlap::__private::Cow::Borrowed("act1"),
                    kind: ::overlap::__private::Cow::Borrowed("Relu"),
                    width: ::overlap::plan::Width::Preserving,
                    flops_per_sample: 2048,
                    params: ::overlap::__private::Cow::Borrowed(&[]),
                },
                ::overlap::plan::LayerInfo {
                    name: ::overlap::__private::Cow::Borrowed("fc2"),
                    kind: ::overlap::__private::Cow::Borrowed("Linear<2048, 2048>"),
                    width: ::overlap::plan::Width::Fixed {
                        input: 2048,
                        output: 2048,
                    },
                    flops_per_sample: 8388608,
                    params: ::overlap::__private::Cow::Borrowed(
                        &[
                            ::overlap::plan::ParamInfo {
                                name: ::overlap::__private::Cow::Borrowed("weight"),
                                shape: ::overlap::__private::Cow::Borrowed(&[2048, 2048]),
                                index: 2,
                                bucket: 1,
                                offset: 2048,
                            },
                            ::overlap::plan::ParamInfo {
                                name: ::overlap::__private::Cow::Borrowed("bias"),
                                shape: ::overlap::__private::Cow::Borrowed(&[2048]),
                                index: 3,
                                bucket: 1,
                                offset: 0,
                            },
                        ],
                    ),
                },
                ::overlap::plan::LayerInfo {
                    name: ::overlap::__private::Cow::Borrowed("act2"),
                    kind: ::overlap::__private::Cow::Borrowed("Relu"),
                    width: ::overlap::plan::Width::Preserving,
                    flops_per_sample: 2048,
                    params: ::overlap::__private::Cow::Borrowed(&[]),
                },
                ::overlap::plan::LayerInfo {
                    name: ::overlap::__private::Cow::Borrowed("fc3"),
                    kind: ::overlap::__private::Cow::Borrowed("Linear<2048, 2048>"),
                    width: ::overlap::plan::Width::Fixed {
                        input: 2048,
                        output: 2048,
                    },
                    flops_per_sample: 8388608,
                    params: ::overlap::__private::Cow::Borrowed(
                        &[
                            ::overlap::plan::ParamInfo {
                                name: ::overlap::__private::Cow::Borrowed("weight"),
                                shape: ::overlap::__private::Cow::Borrowed(&[2048, 2048]),
                                index: 4,
                                bucket: 0,
                                offset: 22538,
                            },
                            ::overlap::plan::ParamInfo {
                                name: ::overlap::__private::Cow::Borrowed("bias"),
                                shape: ::overlap::__private::Cow::Borrowed(&[2048]),
                                index: 5,
                                bucket: 0,
                                offset: 20490,
                            },
                        ],
                    ),
                },
                ::overlap::plan::LayerInfo {
                    name: ::overlap::__private::Cow::Borrowed("act3"),
                    kind: ::overlap::__private::Cow::Borrowed("Relu"),
                    width: ::overlap::plan::Width::Preserving,
                    flops_per_sample: 2048,
                    params: ::overlap::__private::Cow::Borrowed(&[]),
                },
                ::overlap::plan::LayerInfo {
                    name: ::overlap::__private::Cow::Borrowed("head"),
                    kind: ::overlap::__private::Cow::Borrowed("Linear<2048, 10>"),
                    width: ::overlap::plan::Width::Fixed {
                        input: 2048,
                        output: 10,
                    },
                    flops_per_sample: 40960,
                    params: ::overlap::__private::Cow::Borrowed(
                        &[
                            ::overlap::plan::ParamInfo {
                                name: ::overlap::__private::Cow::Borrowed("weight"),
                                shape: ::overlap::__private::Cow::Borrowed(&[10, 2048]),
                                index: 6,
                                bucket: 0,
                                offset: 10,
                            },
                            ::overlap::plan::ParamInfo {
                                name: ::overlap::__private::Cow::Borrowed("bias"),
                                shape: ::overlap::__private::Cow::Borrowed(&[10]),
                                index: 7,
                                bucket: 0,
                                offset: 0,
                            },
                        ],
                    ),
                },
            ],
        ),
        buckets: ::overlap::__private::Cow::Borrowed(
            &[
                ::overlap::plan::BucketInfo {
                    params: ::overlap::__private::Cow::Borrowed(
                        &[
                            ::overlap::plan::ParamRef {
                                layer: 6,
                                param: 1,
                            },
                            ::overlap::plan::ParamRef {
                                layer: 6,
                                param: 0,
                            },
                            ::overlap::plan::ParamRef {
                                layer: 4,
                                param: 1,
                            },
                            ::overlap::plan::ParamRef {
                                layer: 4,
                                param: 0,
                            },
                        ],
                    ),
                    numel: 4216842,
                    launch_after: 4,
                },
                ::overlap::plan::BucketInfo {
                    params: ::overlap::__private::Cow::Borrowed(
                        &[
                            ::overlap::plan::ParamRef {
                                layer: 2,
                                param: 1,
                            },
                            ::overlap::plan::ParamRef {
                                layer: 2,
                                param: 0,
                            },
                        ],
                    ),
                    numel: 4196352,
                    launch_after: 2,
                },
                ::overlap::plan::BucketInfo {
                    params: ::overlap::__private::Cow::Borrowed(
                        &[
                            ::overlap::plan::ParamRef {
                                layer: 0,
                                param: 1,
                            },
                            ::overlap::plan::ParamRef {
                                layer: 0,
                                param: 0,
                            },
                        ],
                    ),
                    numel: 1607680,
                    launch_after: 0,
                },
            ],
        ),
    };
    type Workspace = MlpWorkspace;
    type Grads = MlpGrads;
    type InFlight = MlpInFlight;
    const DEVICE_OPS: &'static [::overlap::DeviceOp] = &[
        <Linear<784, 2048> as ::overlap::Layer>::DEVICE_OP,
        <Relu as ::overlap::Layer>::DEVICE_OP,
        <Linear<2048, 2048> as ::overlap::Layer>::DEVICE_OP,
        <Relu as ::overlap::Layer>::DEVICE_OP,
        <Linear<2048, 2048> as ::overlap::Layer>::DEVICE_OP,
        <Relu as ::overlap::Layer>::DEVICE_OP,
        <Linear<2048, 10> as ::overlap::Layer>::DEVICE_OP,
    ];
    fn init(seed: u64) -> Self {
        Mlp {
            fc1: <Linear<
                784,
                2048,
            > as ::overlap::Layer>::init(&mut ::overlap::InitRng::for_layer(seed, 0)),
            act1: <Relu as ::overlap::Layer>::init(
                &mut ::overlap::InitRng::for_layer(seed, 1),
            ),
            fc2: <Linear<
                2048,
                2048,
            > as ::overlap::Layer>::init(&mut ::overlap::InitRng::for_layer(seed, 2)),
            act2: <Relu as ::overlap::Layer>::init(
                &mut ::overlap::InitRng::for_layer(seed, 3),
            ),
            fc3: <Linear<
                2048,
                2048,
            > as ::overlap::Layer>::init(&mut ::overlap::InitRng::for_layer(seed, 4)),
            act3: <Relu as ::overlap::Layer>::init(
                &mut ::overlap::InitRng::for_layer(seed, 5),
            ),
            head: <Linear<
                2048,
                10,
            > as ::overlap::Layer>::init(&mut ::overlap::InitRng::for_layer(seed, 6)),
        }
    }
    fn new_grads(&self) -> MlpGrads {
        MlpGrads {
            b0: ::overlap::GradBucket::zeros(0, 4216842),
            b1: ::overlap::GradBucket::zeros(1, 4196352),
            b2: ::overlap::GradBucket::zeros(2, 1607680),
            micro_steps: 0,
        }
    }
    fn forward<'w>(
        &self,
        input: &::overlap::Matrix,
        ws: &'w mut MlpWorkspace,
    ) -> &'w ::overlap::Matrix {
        use ::overlap::Layer as _;
        ws.input.clone_from(input);
        {
            let _span = ::overlap::trace::forward(0);
            self.fc1.forward(&ws.input, &mut ws.fc1_out, &mut ws.fc1_saved);
        }
        {
            let _span = ::overlap::trace::forward(1);
            self.act1.forward(&ws.fc1_out, &mut ws.act1_out, &mut ws.act1_saved);
        }
        {
            let _span = ::overlap::trace::forward(2);
            self.fc2.forward(&ws.act1_out, &mut ws.fc2_out, &mut ws.fc2_saved);
        }
        {
            let _span = ::overlap::trace::forward(3);
            self.act2.forward(&ws.fc2_out, &mut ws.act2_out, &mut ws.act2_saved);
        }
        {
            let _span = ::overlap::trace::forward(4);
            self.fc3.forward(&ws.act2_out, &mut ws.fc3_out, &mut ws.fc3_saved);
        }
        {
            let _span = ::overlap::trace::forward(5);
            self.act3.forward(&ws.fc3_out, &mut ws.act3_out, &mut ws.act3_saved);
        }
        {
            let _span = ::overlap::trace::forward(6);
            self.head.forward(&ws.act3_out, &mut ws.head_out, &mut ws.head_saved);
        }
        &ws.head_out
    }
    /// ```text
    /// schedule of Mlp: 3 buckets, 10020874 parameters (38.23 MiB), first bucket closes at 1.00 MiB, others at 8.00 MiB
    /// bucket  all-reduce launched after       bytes  members (buffer order)
    /// b0      fc3.backward                16.09 MiB  head.bias, head.weight, fc3.bias, fc3.weight
    /// b1      fc2.backward                16.01 MiB  fc2.bias, fc2.weight
    /// b2      fc1.backward                 6.13 MiB  fc1.bias, fc1.weight
    /// ```
    fn backward<O: ::overlap::Optimizer>(
        &mut self,
        ws: &mut MlpWorkspace,
        dy: &::overlap::Matrix,
        grads: MlpGrads,
        comm: &::overlap::Communicator,
        optimizer: &mut O,
    ) -> MlpInFlight {
        use ::overlap::Layer as _;
        let MlpGrads { mut b0, mut b1, mut b2, micro_steps } = grads;
        let accumulate = micro_steps > 0;
        let grad_scale = ::overlap::grad_scale(comm.world_size(), micro_steps + 1);
        optimizer.begin_step();
        {
            let _span = ::overlap::trace::backward(6);
            let [head_bias, head_weight] = b0.views_mut([(0, 10), (10, 20480)]);
            self.head
                .backward(
                    &ws.act3_out,
                    &ws.head_out,
                    &ws.head_saved,
                    dy,
                    &mut [head_weight, head_bias],
                    accumulate,
                    ::core::option::Option::Some(&mut ws.act3_grad),
                );
        }
        {
            let _span = ::overlap::trace::backward(5);
            self.act3
                .backward(
                    &ws.fc3_out,
                    &ws.act3_out,
                    &ws.act3_saved,
                    &ws.act3_grad,
                    &mut [],
                    accumulate,
                    ::core::option::Option::Some(&mut ws.fc3_grad),
                );
        }
        {
            let _span = ::overlap::trace::backward(4);
            let [fc3_bias, fc3_weight] = b0.views_mut([(20490, 2048), (22538, 4194304)]);
            self.fc3
                .backward(
                    &ws.act2_out,
                    &ws.fc3_out,
                    &ws.fc3_saved,
                    &ws.fc3_grad,
                    &mut [fc3_weight, fc3_bias],
                    accumulate,
                    ::core::option::Option::Some(&mut ws.act2_grad),
                );
        }
        let b0_in_flight = comm
            .all_reduce_and_update(
                b0,
                &[
                    ::overlap::BucketMember {
                        index: 7,
                        offset: 0,
                    },
                    ::overlap::BucketMember {
                        index: 6,
                        offset: 10,
                    },
                    ::overlap::BucketMember {
                        index: 5,
                        offset: 20490,
                    },
                    ::overlap::BucketMember {
                        index: 4,
                        offset: 22538,
                    },
                ],
                self,
                optimizer,
                grad_scale,
            );
        {
            let _span = ::overlap::trace::backward(3);
            self.act2
                .backward(
                    &ws.fc2_out,
                    &ws.act2_out,
                    &ws.act2_saved,
                    &ws.act2_grad,
                    &mut [],
                    accumulate,
                    ::core::option::Option::Some(&mut ws.fc2_grad),
                );
        }
        {
            let _span = ::overlap::trace::backward(2);
            let [fc2_bias, fc2_weight] = b1.views_mut([(0, 2048), (2048, 4194304)]);
            self.fc2
                .backward(
                    &ws.act1_out,
                    &ws.fc2_out,
                    &ws.fc2_saved,
                    &ws.fc2_grad,
                    &mut [fc2_weight, fc2_bias],
                    accumulate,
                    ::core::option::Option::Some(&mut ws.act1_grad),
                );
        }
        let b1_in_flight = comm
            .all_reduce_and_update(
                b1,
                &[
                    ::overlap::BucketMember {
                        index: 3,
                        offset: 0,
                    },
                    ::overlap::BucketMember {
                        index: 2,
                        offset: 2048,
                    },
                ],
                self,
                optimizer,
                grad_scale,
            );
        {
            let _span = ::overlap::trace::backward(1);
            self.act1
                .backward(
                    &ws.fc1_out,
                    &ws.act1_out,
                    &ws.act1_saved,
                    &ws.act1_grad,
                    &mut [],
                    accumulate,
                    ::core::option::Option::Some(&mut ws.fc1_grad),
                );
        }
        {
            let _span = ::overlap::trace::backward(0);
            let [fc1_bias, fc1_weight] = b2.views_mut([(0, 2048), (2048, 1605632)]);
            self.fc1
                .backward(
                    &ws.input,
                    &ws.fc1_out,
                    &ws.fc1_saved,
                    &ws.fc1_grad,
                    &mut [fc1_weight, fc1_bias],
                    accumulate,
                    ::core::option::Option::None,
                );
        }
        let b2_in_flight = comm
            .all_reduce_and_update(
                b2,
                &[
                    ::overlap::BucketMember {
                        index: 1,
                        offset: 0,
                    },
                    ::overlap::BucketMember {
                        index: 0,
                        offset: 2048,
                    },
                ],
                self,
                optimizer,
                grad_scale,
            );
        comm.backward_done();
        MlpInFlight {
            b0: b0_in_flight,
            b1: b1_in_flight,
            b2: b2_in_flight,
            grad_scale,
        }
    }
    fn backward_no_sync(
        &self,
        ws: &mut MlpWorkspace,
        dy: &::overlap::Matrix,
        grads: &mut MlpGrads,
    ) {
        use ::overlap::Layer as _;
        let MlpGrads { b0, b1, b2, micro_steps } = grads;
        let accumulate = *micro_steps > 0;
        {
            let _span = ::overlap::trace::backward(6);
            let [head_bias, head_weight] = b0.views_mut([(0, 10), (10, 20480)]);
            self.head
                .backward(
                    &ws.act3_out,
                    &ws.head_out,
                    &ws.head_saved,
                    dy,
                    &mut [head_weight, head_bias],
                    accumulate,
                    ::core::option::Option::Some(&mut ws.act3_grad),
                );
        }
        {
            let _span = ::overlap::trace::backward(5);
            self.act3
                .backward(
                    &ws.fc3_out,
                    &ws.act3_out,
                    &ws.act3_saved,
                    &ws.act3_grad,
                    &mut [],
                    accumulate,
                    ::core::option::Option::Some(&mut ws.fc3_grad),
                );
        }
        {
            let _span = ::overlap::trace::backward(4);
            let [fc3_bias, fc3_weight] = b0.views_mut([(20490, 2048), (22538, 4194304)]);
            self.fc3
                .backward(
                    &ws.act2_out,
                    &ws.fc3_out,
                    &ws.fc3_saved,
                    &ws.fc3_grad,
                    &mut [fc3_weight, fc3_bias],
                    accumulate,
                    ::core::option::Option::Some(&mut ws.act2_grad),
                );
        }
        {
            let _span = ::overlap::trace::backward(3);
            self.act2
                .backward(
                    &ws.fc2_out,
                    &ws.act2_out,
                    &ws.act2_saved,
                    &ws.act2_grad,
                    &mut [],
                    accumulate,
                    ::core::option::Option::Some(&mut ws.fc2_grad),
                );
        }
        {
            let _span = ::overlap::trace::backward(2);
            let [fc2_bias, fc2_weight] = b1.views_mut([(0, 2048), (2048, 4194304)]);
            self.fc2
                .backward(
                    &ws.act1_out,
                    &ws.fc2_out,
                    &ws.fc2_saved,
                    &ws.fc2_grad,
                    &mut [fc2_weight, fc2_bias],
                    accumulate,
                    ::core::option::Option::Some(&mut ws.act1_grad),
                );
        }
        {
            let _span = ::overlap::trace::backward(1);
            self.act1
                .backward(
                    &ws.fc1_out,
                    &ws.act1_out,
                    &ws.act1_saved,
                    &ws.act1_grad,
                    &mut [],
                    accumulate,
                    ::core::option::Option::Some(&mut ws.fc1_grad),
                );
        }
        {
            let _span = ::overlap::trace::backward(0);
            let [fc1_bias, fc1_weight] = b2.views_mut([(0, 2048), (2048, 1605632)]);
            self.fc1
                .backward(
                    &ws.input,
                    &ws.fc1_out,
                    &ws.fc1_saved,
                    &ws.fc1_grad,
                    &mut [fc1_weight, fc1_bias],
                    accumulate,
                    ::core::option::Option::None,
                );
        }
        *micro_steps += 1;
    }
    fn step<O: ::overlap::Optimizer>(
        &mut self,
        in_flight: MlpInFlight,
        optimizer: &mut O,
    ) -> ::overlap::Result<MlpGrads> {
        use ::overlap::Layer as _;
        let MlpInFlight {
            b0: b0_in_flight,
            b1: b1_in_flight,
            b2: b2_in_flight,
            grad_scale,
        } = in_flight;
        let mut b0 = b0_in_flight.wait()?;
        if !b0.give_back_updated(self, optimizer) {
            let _span = ::overlap::trace::update(0);
            optimizer.update(7, self.head.param_mut(1), b0.view(0, 10), grad_scale);
            optimizer.update(6, self.head.param_mut(0), b0.view(10, 20480), grad_scale);
            optimizer.update(5, self.fc3.param_mut(1), b0.view(20490, 2048), grad_scale);
            optimizer
                .update(4, self.fc3.param_mut(0), b0.view(22538, 4194304), grad_scale);
            b0.clear();
        }
        let mut b1 = b1_in_flight.wait()?;
        if !b1.give_back_updated(self, optimizer) {
            let _span = ::overlap::trace::update(1);
            optimizer.update(3, self.fc2.param_mut(1), b1.view(0, 2048), grad_scale);
            optimizer
                .update(2, self.fc2.param_mut(0), b1.view(2048, 4194304), grad_scale);
            b1.clear();
        }
        let mut b2 = b2_in_flight.wait()?;
        if !b2.give_back_updated(self, optimizer) {
            let _span = ::overlap::trace::update(2);
            optimizer.update(1, self.fc1.param_mut(1), b2.view(0, 2048), grad_scale);
            optimizer
                .update(0, self.fc1.param_mut(0), b2.view(2048, 1605632), grad_scale);
            b2.clear();
        }
        ::core::result::Result::Ok(MlpGrads {
            b0,
            b1,
            b2,
            micro_steps: 0,
        })
    }
    fn param(&self, p: ::overlap::plan::ParamRef) -> &[f32] {
        use ::overlap::Layer as _;
        match p.layer {
            0 => self.fc1.param(p.param),
            2 => self.fc2.param(p.param),
            4 => self.fc3.param(p.param),
            6 => self.head.param(p.param),
            _ => ::core::panic!("{:?} is not a parameter of {}", p, "Mlp"),
        }
    }
    fn param_mut(&mut self, p: ::overlap::plan::ParamRef) -> &mut [f32] {
        use ::overlap::Layer as _;
        match p.layer {
            0 => self.fc1.param_mut(p.param),
            2 => self.fc2.param_mut(p.param),
            4 => self.fc3.param_mut(p.param),
            6 => self.head.param_mut(p.param),
            _ => ::core::panic!("{:?} is not a parameter of {}", p, "Mlp"),
        }
    }
}
impl ::overlap::ParamVecs for Mlp {
    fn param_vec_mut(
        &mut self,
        index: usize,
    ) -> ::core::option::Option<&mut ::std::vec::Vec<f32>> {
        use ::overlap::Layer as _;
        match index {
            0 => self.fc1.param_vec_mut(0),
            1 => self.fc1.param_vec_mut(1),
            2 => self.fc2.param_vec_mut(0),
            3 => self.fc2.param_vec_mut(1),
            4 => self.fc3.param_vec_mut(0),
            5 => self.fc3.param_vec_mut(1),
            6 => self.head.param_vec_mut(0),
            7 => self.head.param_vec_mut(1),
            _ => ::core::panic!("{} has no parameter {}", "Mlp", index),
        }
    }
}
const _: () = ::core::assert!(
    ::overlap::__private::layer_matches:: < Linear < 784, 2048 > >
    (::overlap::plan::Width::Fixed { input : 784, output : 2048 }, & [& [2048, 784], &
    [2048]]),
    "layer `fc1`: `Linear<784, 2048>` does not have the widths and parameter shapes the bucket schedule was planned with (see its `overlap::Layer` constants)"
);
const _: () = ::core::assert!(
    ::overlap::__private::layer_matches:: < Relu > (::overlap::plan::Width::Preserving, &
    []),
    "layer `act1`: `Relu` does not have the widths and parameter shapes the bucket schedule was planned with (see its `overlap::Layer` constants)"
);
const _: () = ::core::assert!(
    ::overlap::__private::layer_matches:: < Linear < 2048, 2048 > >
    (::overlap::plan::Width::Fixed { input : 2048, output : 2048 }, & [& [2048, 2048], &
    [2048]]),
    "layer `fc2`: `Linear<2048, 2048>` does not have the widths and parameter shapes the bucket schedule was planned with (see its `overlap::Layer` constants)"
);
const _: () = ::core::assert!(
    ::overlap::__private::layer_matches:: < Relu > (::overlap::plan::Width::Preserving, &
    []),
    "layer `act2`: `Relu` does not have the widths and parameter shapes the bucket schedule was planned with (see its `overlap::Layer` constants)"
);
const _: () = ::core::assert!(
    ::overlap::__private::layer_matches:: < Linear < 2048, 2048 > >
    (::overlap::plan::Width::Fixed { input : 2048, output : 2048 }, & [& [2048, 2048], &
    [2048]]),
    "layer `fc3`: `Linear<2048, 2048>` does not have the widths and parameter shapes the bucket schedule was planned with (see its `overlap::Layer` constants)"
);
const _: () = ::core::assert!(
    ::overlap::__private::layer_matches:: < Relu > (::overlap::plan::Width::Preserving, &
    []),
    "layer `act3`: `Relu` does not have the widths and parameter shapes the bucket schedule was planned with (see its `overlap::Layer` constants)"
);
const _: () = ::core::assert!(
    ::overlap::__private::layer_matches:: < Linear < 2048, 10 > >
    (::overlap::plan::Width::Fixed { input : 2048, output : 10 }, & [& [10, 2048], &
    [10]]),
    "layer `head`: `Linear<2048, 10>` does not have the widths and parameter shapes the bucket schedule was planned with (see its `overlap::Layer` constants)"
);
