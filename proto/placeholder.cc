namespace tg::rpc {}
