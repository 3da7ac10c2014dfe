"""Test fixture: the train-suite parsers of Primus's ``primus/core/launcher/parser.py`` (fd1eeab).

``add_pretrain_parser`` / ``add_posttrain_parser`` add the suite options the real ones add
(``--config`` alias ``--exp``, ``--data_path``, ``--backend_path``, ``--export_config``); everything
else on the command line reaches ``run`` as overrides.
"""


def add_pretrain_parser(parser):
    parser.add_argument("--config", "--exp", dest="config", required=True, help="experiment YAML")
    parser.add_argument("--data_path", default="./data")
    parser.add_argument("--backend_path", nargs="?", default=None)
    parser.add_argument("--export_config", default=None)
    return parser


def add_posttrain_parser(parser):
    return add_pretrain_parser(parser)
