"""Word language model: Embedding -> 2-layer LSTM -> Dropout -> Linear decoder, with the
decoder weight tied to the embedding (pytorch/examples' word_language_model RNNModel,
tie_weights=True). Exercises nn.LSTM (a fused RNN op on CPU), int64 token inputs in
(seq, batch) layout, a hidden state (h0, c0) taken and returned, and tied weights.
"""
import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 50
DIM = 16  # embedding and hidden size: equal, so the weights can be tied
LAYERS = 2
SEQ = 5
BATCH = 2


class RNNModel(nn.Module):
    def __init__(self, ntoken=VOCAB, ninp=DIM, nhid=DIM, nlayers=LAYERS, dropout=0.2):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.decoder.weight = self.encoder.weight

    def forward(self, input, h0, c0):
        emb = self.drop(self.encoder(input))
        output, (h, c) = self.rnn(emb, (h0, c0))
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), h, c


def _init_(model, seed):
    """Deterministically re-initialise all parameters from a local generator."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.encoder.weight.uniform_(-0.1, 0.1, generator=g)  # also the decoder's weight
        model.decoder.bias.zero_()
        for p in model.rnn.parameters():
            p.uniform_(-0.25, 0.25, generator=g)
    return model


def build_model() -> nn.Module:
    # fork_rng: the default nn init draws from the global RNG; restore it so building has no side effects.
    with torch.random.fork_rng(devices=[]):
        model = RNNModel()
    return _init_(model, seed=0).eval()


def example_inputs():
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (SEQ, BATCH), generator=g, dtype=torch.int64)
    h0 = torch.randn(LAYERS, BATCH, DIM, generator=g) * 0.1
    c0 = torch.randn(LAYERS, BATCH, DIM, generator=g) * 0.1
    return (tokens, h0, c0)


def loss(outputs, input, h0, c0):
    # Next-token negative log-likelihood: the output at step t predicts input[t + 1].
    log_probs = outputs[0].view(*input.shape, VOCAB)[:-1]
    return F.nll_loss(log_probs.reshape(-1, VOCAB), input[1:].reshape(-1))


_batch = torch.export.Dim("batch", min=2, max=64)
dynamic_shapes = {"input": {1: _batch}, "h0": {1: _batch}, "c0": {1: _batch}}
